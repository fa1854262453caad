"""The ranks read checkpoints through megatron-core, which unpickles the common state and every ShardedObject
with torch DCP's planner (``torch.load(weights_only=False)``): a planted object runs there. With the engine's
``compat.install()`` (every rank, ``mtk convert``) those reads admit only the globals checkpoints hold (issue 43)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.hostile_checkpoint import plant, touching

ROOT = Path(__file__).resolve().parents[3]
PLAIN = ROOT / "tests" / "fixtures" / "megatron_lm" / "plain_tp2" / "checkpoints" / "iter_0000004"

LOAD = """
import sys
from mtk.training import compat
compat.{setup}()
from megatron.core import dist_checkpointing
common = dist_checkpointing.load_common_state_dict(sys.argv[1])
print("loaded iteration", common["iteration"])
"""


def _load(iter_dir: Path, setup: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD.format(setup=setup), str(iter_dir)], capture_output=True,
                          text=True, timeout=600, cwd=iter_dir.parent)


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    iter_dir = tmp_path / "iter_0000004"
    shutil.copytree(PLAIN, iter_dir)
    marker = tmp_path / "ran"
    plant(iter_dir, "common_state/shard_0_1", [{"iteration": 4, "args": touching(marker)}])
    return iter_dir, marker


def test_megatron_core_alone_runs_a_planted_common_state(tmp_path):
    """Why the guard exists: without it the payload runs inside megatron-core's own reader."""
    iter_dir, marker = _planted(tmp_path)
    out = _load(iter_dir, "install_import_stubs")
    assert out.returncode == 0 and marker.exists(), out.stderr[-3000:]


def test_with_the_engines_setup_the_ranks_refuse_it_and_run_nothing(tmp_path):
    iter_dir, marker = _planted(tmp_path)
    out = _load(iter_dir, "install")
    assert out.returncode != 0 and not marker.exists(), out.stdout + out.stderr[-3000:]
    assert f"{iter_dir}: the common state holds posix.system, which a checkpoint never holds" in out.stderr


def test_with_the_engines_setup_megatron_lms_checkpoint_still_loads(tmp_path):
    out = _load(PLAIN, "install")
    assert out.returncode == 0 and "loaded iteration 4" in out.stdout, out.stderr[-3000:]


def test_every_global_megatron_core_admits_is_admitted():
    """megatron-core registers these for its own weights_only loads: a checkpoint may hold each (and a new one in a
    megatron-core upgrade shows here)."""
    from mtk.training import compat

    compat.install_import_stubs()
    from megatron.core.safe_globals import SAFE_GLOBALS

    from mtk import checkpoint_unpickle

    allowed = checkpoint_unpickle.CHECKPOINT_GLOBALS
    for obj in SAFE_GLOBALS:
        assert checkpoint_unpickle.admitted(obj.__module__, obj.__qualname__, allowed), obj
