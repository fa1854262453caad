"""An input error in a multi-node training job is reported once per job, on the real two-node cluster: every node
runs the real `mtk-entrypoint train`, finds the checkpoint to resume from damaged and stops before torchrun, but
only node 0 names the file; the batch script does not restart a job that failed on bad input (a restart would
read the same file and say it again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtk import exitcodes

pytestmark = pytest.mark.integration


def damaged_checkpoint(root: Path, iteration: int = 10) -> Path:
    """A torch_dist checkpoint whose tracker is fine and whose shard is truncated; returns the shard."""
    import torch
    import torch.distributed.checkpoint as dcp

    path = root / f"iter_{iteration:07d}"
    dcp.save({"w": torch.arange(4096, dtype=torch.float32)}, checkpoint_id=str(path), no_dist=True)
    (root / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    shard = next(path.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    return shard


def test_a_damaged_checkpoint_is_named_once_per_job_not_per_node(harness, mtk_venv):
    ckpt = harness.root / "ckpt"
    shard = damaged_checkpoint(ckpt)
    run = harness.launch(harness.spec("damaged", train={"checkpoint.dir": str(ckpt)}),
                         f"cluster.slurm.venv={mtk_venv}")
    job = harness.run_record(run)["ids"]["train"]
    harness.wait("the job to end", lambda: (run / "state" / "final").exists() and not harness.active_jobs(),
                 timeout=300)
    assert (run / "state" / "final").read_text() == "bad-input\n"
    assert (run / "state" / f"train.{job}.exit").read_text().strip() == str(exitcodes.USAGE)

    logs = {p.name: p.read_text() for p in (run / "logs").iterdir()}
    everything = "\n".join(logs.values())
    assert everything.count(str(shard)) == 1, logs  # once per job: not per node, not per restart
    line = next(ln for ln in everything.splitlines() if str(shard) in ln)
    assert line.startswith("0: ") and "truncated" in line and "error:" in line, line  # node 0, with the fix
    assert everything.count("truncated") == 1, logs
    assert "Traceback" not in everything, logs
    assert "1: mtk-entrypoint train: error: the checkpoint to resume from cannot be loaded: node 0" in everything
    assert "restart 1" not in everything and "torchrun exited" not in everything, logs  # no restart, no rank

    events = (run / "state" / "events.log").read_text()
    assert "stopped on bad input exit=2" in events and "requeue" not in events, events
    status = harness.mtk("status", str(run)).stdout
    assert "stopped on bad input" in status, status
