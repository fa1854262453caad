"""Tests by cost: markers come from what a test uses, so `-m fast` leaves out daemons, torchrun and megatron."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: every test deselected
    return {line.split("::")[0] for line in out.stdout.splitlines() if "::" in line}


def test_fast_leaves_out_daemons_torchrun_and_megatron_but_keeps_pure_logic():
    picked = _collected("-m", "fast", "tests/integration/slurm/test_slurm_spare_nodes.py",
                        "tests/unit/data/test_data_mixture.py", "tests/unit/launcher/test_rendezvous.py")
    assert picked == {"tests/unit/launcher/test_rendezvous.py"}


def test_fixture_marks_slurm_and_module_import_marks_megatron():
    assert _collected("-m", "slurm", "tests/integration/slurm/test_slurm_spare_nodes.py",
                      "tests/unit/launcher/test_rendezvous.py") == {"tests/integration/slurm/test_slurm_spare_nodes.py"}
    assert _collected("-m", "megatron", "tests/unit/data/test_data_mixture.py",
                      "tests/unit/launcher/test_rendezvous.py") == {"tests/unit/data/test_data_mixture.py"}
