"""Golden files: every example rendered by every backend it targets, byte for byte.

After an intended change, regenerate with ``make golden`` (MTK_REGEN_GOLDEN=1) and review ``git diff tests/golden``.
Paths are pinned (run dir /shared/runs/..., relative dirs resolved against /shared) so the files do not depend
on the machine or the checkout location.
"""

from __future__ import annotations

import difflib
import os
import shlex
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths

from mtk.backends import get_backend
from mtk.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
REGEN = os.environ.get("MTK_REGEN_GOLDEN") == "1"
EKS_PATHS = ["image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com", "cluster.runs_dir=/fsx/runs",
             "data.dir=/fsx/data"]

# (example, backend, overrides that only adapt the example to the backend)
CASES = [
    ("tiny.yaml", "local", []),
    ("tiny.yaml", "slurm", ["cluster.slurm.runtime=bare"]),
    ("tiny.yaml", "eks", EKS_PATHS),
    ("tiny-slurm.yaml", "slurm", []),
    ("seed-multinode.yaml", "slurm", []),
    ("gpt-7.5b-p5-slurm.yaml", "slurm", []),
    ("gpt-7.5b-p5-eks.yaml", "eks", []),
]


def render(example: str, backend: str, overrides: list[str]) -> dict[str, str]:
    job = load_job(ROOT / "examples" / example, overrides, backend=backend)
    job = resolve_paths(job, backend, cwd="/shared")
    run_dir = f"/shared/runs/{Path(example).stem}-{backend}"
    artifacts = get_backend(backend).render(job, run_dir)
    files = dict(artifacts.files)
    files["COMMANDS"] = "".join(shlex.join(c) + "\n" for c in artifacts.commands)
    return files


@pytest.mark.parametrize(("example", "backend", "overrides"), CASES, ids=[f"{e}-{b}" for e, b, _ in CASES])
def test_golden(example, backend, overrides):
    files = render(example, backend, overrides)
    folder = GOLDEN / Path(example).stem / backend
    if REGEN:
        if folder.exists():
            for old in folder.rglob("*"):
                if old.is_file():
                    old.unlink()
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    expected = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()} \
        if folder.exists() else {}
    assert expected, f"no golden files in {folder}; run `make golden`"
    assert sorted(files) == sorted(expected), "file set changed; run `make golden` and review the diff"
    for rel in files:
        if files[rel] != expected[rel]:
            diff = "".join(difflib.unified_diff(expected[rel].splitlines(True), files[rel].splitlines(True),
                                                f"golden/{rel}", f"rendered/{rel}"))
            pytest.fail(f"{example} × {backend}: {rel} differs (regenerate: make golden)\n{diff}")


def test_render_twice_is_identical():
    assert render("tiny.yaml", "local", []) == render("tiny.yaml", "local", [])
