"""A second launch onto the checkpoint dir of a run Slurm still holds is refused at ``mtk launch`` (exit 2, the
running run and how to stop it named, nothing written or queued), by the lease rules the nodes apply: the
holder's job is asked of the real Slurm cluster; once it is cancelled, the same launch goes through."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_a_second_launch_of_a_running_job_is_refused_before_it_queues(harness, stub_venv):
    ckpt = harness.root / "shared" / "ckpt"
    spec = harness.spec("lease", train={"checkpoint.dir": str(ckpt)})
    venv = f"cluster.slurm.venv={stub_venv}"
    first = harness.launch(spec, venv, env={"MTK_STUB": "sleep:300"})
    job = harness.run_record(first)["ids"]["train"]
    # The first launch holds the lease since before it submitted (handed to its Slurm job); what rank 0 of the
    # first run writes on node1 when it starts (training/lease.py) replaces it: its host, pid and job.
    assert json.loads((ckpt / ".mtk-writer.json").read_text())["job_id"] == job
    (ckpt / ".mtk-writer.json").write_text(json.dumps(
        {"host": "node1", "pid": 4242, "job_id": job, "run_dir": str(first), "since": 0}) + "\n")

    runs_before = sorted((harness.root / "runs").iterdir())
    second = harness.mtk("launch", str(spec), "--backend", "slurm", "--no-megatron-check", "--set", venv,
                         check=False)
    assert second.returncode == 2, (second.stdout, second.stderr)
    err = second.stderr
    assert "train.checkpoint.dir" in err and f"run {first}" in err and f"job {job}" in err, err
    assert f"mtk cancel {first}" in err and "Traceback" not in err, err
    assert sorted((harness.root / "runs").iterdir()) == runs_before, "no run dir for the refused launch"
    assert [j.split()[0] for j in harness.active_jobs()] == [job], "nothing queued by the refused launch"

    harness.mtk("cancel", str(first))  # returns once Slurm reports none of its jobs pending or running
    third = harness.mtk("launch", str(spec), "--backend", "slurm", "--no-megatron-check", "--set", venv)
    assert "run: " in third.stdout  # the holder's job is over: the nodes would take the lease over, so launch does
