"""The on-demand Megatron-LM tests are never left out silently: a run that does not name their folder deselects
them (pytest counts them) and its summary names each one with the reason; naming the folder selects them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "tests/integration/training/megatron_lm"


def _collect(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_a_run_of_the_parent_folder_reports_them_deselected_with_the_reason():
    text = _collect("tests/integration/training")
    assert f"deselected {FOLDER}/test_pretrain_gpt_resumes_mtk.py::" in text
    assert "deselected: on demand: needs a Megatron-LM tree" in text and "make test-megatron-lm" in text
    assert not [line for line in text.splitlines() if line.startswith(f"{FOLDER}/")], "collected, not deselected"


def test_naming_the_folder_selects_them():
    text = _collect(FOLDER)
    assert f"{FOLDER}/test_pretrain_gpt_resumes_mtk.py::test_pretrain_gpt_resumes_mtk_run_with_mtk_losses" in text
    assert "deselected" not in text
