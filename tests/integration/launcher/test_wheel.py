"""A built wheel contains every template and works in a fresh venv (not just the editable checkout)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = ("launcher", "containers", "slurm", "k8s", "data_jobs", "training")

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
    )
    return next(out.glob("mtk-*.whl"))


def source_templates() -> set[str]:
    found = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.j2"):
            found.add(f"mtk/{path.relative_to(ROOT).as_posix()}")
    return found


def test_wheel_contains_every_template_and_subpackage(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = source_templates() - names
    assert not missing, f"templates missing from the wheel: {sorted(missing)}"
    for folder in FOLDERS:
        assert f"mtk/{folder}/__init__.py" in names
    assert not any(n.startswith(("tests/", "mtk/tests/")) for n in names)
    assert "mtk/k8s/schemas/pytorchjob-v1.json" in names  # the manifests' offline check reads it (#46)


def test_wheel_imports_in_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
    script = (
        "import importlib, importlib.resources as r\n"
        f"for f in {FOLDERS!r}:\n    importlib.import_module('mtk.' + f)\n"
        "import mtk.spec, mtk.launcher.cli\n"
        "dirs = [r.files('mtk.' + f) / 'templates' for f in ('slurm', 'k8s', 'containers')]\n"
        "names = sorted(p.name for d in dirs if d.is_dir() for p in d.iterdir() if p.name.endswith('.j2'))\n"
        "print(','.join(names))\n"
    )
    out = subprocess.run([py, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    expected = sorted(
        Path(t).name
        for t in source_templates()
        if t.split("/")[1] in ("slurm", "k8s", "containers") and "/templates/" in t
    )
    assert expected, "the source tree has Jinja templates under slurm/, k8s/ and containers/: none found"
    assert out.stdout.strip().split(",") == expected
    help_out = subprocess.run([env_dir / "bin" / "mtk", "--help"], capture_output=True, text=True)
    assert help_out.returncode == 0 and "launch" in help_out.stdout
    ep = subprocess.run([env_dir / "bin" / "mtk-entrypoint", "--help"], capture_output=True, text=True)
    assert ep.returncode == 0 and "preprocess" in ep.stdout
