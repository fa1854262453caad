"""A job.json started by hand (no launch, so no ``train.checkpoint.dir``) has one checkpoint dir: the preflight's
storage probe looks where the engine writes and where a restart resumes (``mtk.checkpoint_paths.checkpoint_dir``:
``<run_dir>/checkpoints``), not at the launch's ``<runs_dir>/<name>/checkpoints``."""

from __future__ import annotations

import json

from mtk.launcher import preflight

from mtk import checkpoint_paths
from mtk.spec import load_job_json


def test_a_hand_started_job_resumes_where_the_preflight_looked(tmp_path, tr):
    run_dir = tmp_path / "run"
    sets = ("parallel.tp=1", "cluster.procs_per_node=1", "train.checkpoint.save_interval=2", "train.lr_warmup_iters=1",
            "train.lr_decay_iters=4", f"cluster.runs_dir={tmp_path / 'runs'}")
    job = load_job_json(tr.make_job(run_dir, *sets, "train.iterations=2"))
    assert job.train.checkpoint.dir is None
    ckpt = run_dir / "checkpoints"
    assert checkpoint_paths.checkpoint_dir(None, run_dir) == str(ckpt)

    ckpt.write_text("a file where the checkpoint dir goes: the probe must fail on it, naming where it looked")
    problems = preflight.node_checks(job, str(run_dir)).problems
    assert [p for p in problems if p.startswith(f"storage: train.checkpoint.dir {ckpt} is not writable")], problems
    ckpt.unlink()
    assert preflight.node_checks(job, str(run_dir)).problems == []
    assert not (tmp_path / "runs").exists()  # the launch's default is no fallback

    assert tr.run(run_dir, nproc=1) == 0
    assert tr.tracker(ckpt) == 2
    tr.make_job(run_dir, *sets, "train.iterations=4")  # the same run, longer: a restart
    assert tr.run(run_dir, nproc=1, tag="again") == 0
    assert tr.tracker(ckpt) == 4
    log = (run_dir / "again.log").read_text()
    assert f"[checkpoint] resumed from {ckpt}/" in log, log[-3000:]
    assert sorted(tr.by_iteration(run_dir)) == [1, 2, 3, 4]
    assert json.loads((run_dir / "job.json").read_text())["train"]["checkpoint"]["dir"] is None
