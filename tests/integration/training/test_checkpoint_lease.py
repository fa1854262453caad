"""Two real runs pointed at one checkpoint dir: the second is refused by name, in one line, and deletes nothing of
the first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_second_run_on_a_shared_checkpoint_dir_is_refused_in_one_line_and_leaves_the_first_alone(tr, engine_root):
    shared = engine_root / "lease-ckpt"
    a, b = engine_root / "lease-a", engine_root / "lease-b"
    common = (f"train.checkpoint.dir={shared}", "train.checkpoint.save_interval=100000", "train.lr_warmup_iters=1")
    tr.make_job(a, "train.iterations=1000000", *common)  # runs until killed below
    first = tr.start(a, tag="first")
    try:
        tr.wait_for_iteration(first, a, 2)
        in_flight = shared / "iter_0000999.partial"  # stands for the first run's save being written
        in_flight.mkdir()
        tr.make_job(b, "train.iterations=4", *common)
        # what every backend runs on a node: `mtk-entrypoint train` (torchrun, 2 ranks)
        second = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "train", "--job",
                                 str(b / "job.json"), "--run-dir", str(b)], cwd=b, env=tr.env(None),
                                capture_output=True, text=True, timeout=tr.RUN_TIMEOUT)
        log = second.stdout + second.stderr
        assert second.returncode == 2, log[-3000:]  # bad input: the Slurm script does not restart it
        refusal = f"[mtk] error: checkpoint dir {shared} is in use by run {a}"
        assert log.count(refusal) == 1, log[-3000:]
        assert "Traceback" not in log and "ChildFailedError" not in log, log[-3000:]
        assert in_flight.is_dir(), "the second run deleted the first run's partial save"
        assert first.poll() is None, "the first run must keep going"
    finally:
        tr.kill_tree(first)
        first.log_file.close()
