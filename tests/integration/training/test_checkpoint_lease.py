"""Two real runs pointed at one checkpoint dir: the second is refused by name and deletes nothing of the first."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_second_run_on_a_shared_checkpoint_dir_is_refused_and_leaves_the_first_alone(tr, engine_root):
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
        rc = tr.run(b, tag="second")
        log = (b / "second.log").read_text()
        assert rc != 0
        assert f"checkpoint dir {shared} is in use by run {a}" in log, log[-3000:]
        assert in_flight.is_dir(), "the second run deleted the first run's partial save"
        assert first.poll() is None, "the first run must keep going"
    finally:
        tr.kill_tree(first)
        first.log_file.close()
