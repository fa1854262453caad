"""The README's environment carries what the README shows: `make demo` installs requirements/demo.lock, and the
verbs the README runs after it (`mtk report` draws plots, `mtk convert` writes an HF directory) import only
what that lock pins. A missing optional dependency is one message that names the install command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _locked(name: str) -> set[str]:
    text = (REPO / "requirements" / name).read_text()
    return {m.group(1).lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", text, re.M)}


def _extra(name: str) -> set[str]:
    import tomllib

    reqs = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_demo_lock_holds_what_report_and_convert_import():
    from mtk.launcher.cli.convert import CONVERT_NEEDS

    demo = _locked("demo.lock")
    assert "matplotlib" in demo  # launcher/report/plots.py: the PNGs `mtk report` draws
    assert set(CONVERT_NEEDS) <= demo  # what `mtk convert` checks for before it starts
    assert _extra("report") | _extra("convert") <= demo
    assert {"torch", "numpy", "tokenizers", "psutil"} <= demo  # training and preprocessing, as before
    assert "transformers" in demo  # README loads the export with AutoModelForCausalLM / AutoTokenizer
    assert _extra("image") | _extra("eks") | _extra("hf") <= demo  # build-image, launch --backend eks
    assert demo <= _locked("test.lock")  # the demo set is resolved inside the test set


def test_missing_convert_dependency_names_the_install_command(tmp_path):
    """With safetensors hidden from the import system, `mtk convert` stops at once with one line (exit 2: set-up,
    like any missing optional library)."""
    hide = ("import sys\n"
            "sys.modules['safetensors'] = None  # as if not installed: find_spec None, import fails\n"
            "from mtk.launcher.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    res = subprocess.run([sys.executable, "-c", hide, "convert", str(tmp_path), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "mtk convert needs safetensors" in res.stderr
    assert "pip install 'mtk[convert]'" in res.stderr
    assert res.stderr.endswith("\n") and res.stderr.count("\n") == 1, repr(res.stderr)
    assert not (tmp_path / "out").exists()
