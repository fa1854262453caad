"""Real training on the two-node cluster (CPU, gloo, the tiny GPT at tp=2 across node1 and node2):
fault tolerance (kill -9 of one node's workers, save/exit triggers, a SIGSTOPped rank) compared loss for loss
with an uninterrupted run. The example's preprocess -> train chain (afterok, `mtk logs -f`, the venv on every
node) and USR2 save + requeue + resume are J1's steps (tests/journeys/test_j1_slurm.py), on a real corpus."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
from support.faults import Hold

pytestmark = pytest.mark.integration

FT_ITERS, FT_SAVE = 12, 4
FT_TRAIN = {"iterations": FT_ITERS, "checkpoint.save_interval": FT_SAVE, "eval_interval": None,
            "lr_warmup_iters": 2}


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)


@pytest.fixture(scope="module")
def reference(module_harness, mtk_venv, read_metrics) -> dict[int, float]:
    """The uninterrupted run every fault-tolerance test compares with."""
    h = module_harness
    run = h.launch(h.spec("ft", train=FT_TRAIN), f"cluster.slurm.venv={mtk_venv}")
    h.wait_state(run, {"COMPLETED"}, timeout=600)
    losses = read_metrics(run)
    assert sorted(losses) == list(range(1, FT_ITERS + 1))
    return losses


def _iteration(read_metrics, run: Path) -> int:
    return max(read_metrics(run), default=0)


def _workers_on(node_id: str, run: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mtk.training.worker" in cmd and str(run).encode() in cmd and f"SLURM_NODEID={node_id}".encode() in env:
            pids.append(int(proc.name))
    return pids


def test_kill_9_of_one_nodes_workers_requeues_and_resumes(harness, mtk_venv, reference, read_metrics):
    # Both ranks wait after iteration FT_SAVE + 2 (the checkpoint and two more) until the kill has landed.
    hold = Hold(harness.root / "hold", after=[FT_SAVE + 2])
    run = harness.launch(harness.spec("ft", train=FT_TRAIN), f"cluster.slurm.venv={mtk_venv}", env=hold.env())
    job = harness.run_record(run)["ids"]["train"]
    ckpt = harness.root / "runs" / "ft" / "checkpoints" / "latest_checkpointed_iteration.txt"
    harness.wait("both ranks to wait after a checkpoint and two more iterations",
                 lambda: hold.held(FT_SAVE + 2, ranks=2), timeout=600)
    assert int(ckpt.read_text()) == FT_SAVE
    killed_at = _iteration(read_metrics, run)
    assert killed_at == FT_SAVE + 2
    victims = _workers_on("1", run)
    assert victims, "no training worker found on node2"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    hold.release(FT_SAVE + 2)  # node1's rank goes on into a collective with the dead rank

    harness.wait("the failure to be noticed and requeued", lambda: "failed exit=" in (run / "state" / "events.log")
                 .read_text(), timeout=300)
    done = harness.wait_state(run, {"COMPLETED"}, timeout=600)
    assert "restarts=1" in done["reason"]
    events = (run / "state" / "events.log").read_text()
    resumed_from = int(events.split("failed exit=")[1].split("checkpoint=")[1].split(")")[0])
    assert f"train: job {job}, restart 1" in (run / "logs" / f"train-{job}.out").read_text()
    assert killed_at - resumed_from <= FT_SAVE + 1  # iterations lost ≤ the save interval (+ the one in flight)
    losses = read_metrics(run)
    assert sorted(losses) == sorted(reference)
    assert all(close(losses[i], reference[i]) for i in range(resumed_from + 1, FT_ITERS + 1))


def test_save_trigger_checkpoints_without_stopping_and_exit_trigger_stops_cleanly(harness, mtk_venv,
                                                                                     read_metrics):
    train = {**FT_TRAIN, "iterations": 200, "checkpoint.save_interval": None}
    hold = Hold(harness.root / "hold", after=[3, 8])  # each trigger is written while both ranks wait
    run = harness.launch(harness.spec("trig", train=train), f"cluster.slurm.venv={mtk_venv}", env=hold.env())
    tracker = harness.root / "runs" / "trig" / "checkpoints" / "latest_checkpointed_iteration.txt"
    harness.wait("both ranks to wait after iteration 3", lambda: hold.held(3, ranks=2), timeout=600)
    harness.mtk("save", str(run))
    hold.release(3)
    harness.wait("the save trigger's checkpoint", tracker.exists, timeout=300)
    saved = int(tracker.read_text())
    assert saved == 4  # the trigger is read every log_interval (1): at the first iteration after the release
    assert harness.state(run)["state"] == "RUNNING"
    harness.wait("both ranks to wait after iteration 8", lambda: hold.held(8, ranks=2), timeout=300)
    assert _iteration(read_metrics, run) == 8 > saved + 1  # training went on after the save

    harness.mtk("stop", str(run))
    hold.release(8)
    done = harness.wait_state(run, {"STOPPED"}, timeout=300)  # mtk status: the train step STOPPED, exit 0
    assert "stopped by the exit trigger" in done["reason"] and "restarts" not in done["reason"]
    [row] = [r for r in json.loads(harness.mtk("ls", "--json").stdout) if r["run_dir"] == str(run)]
    assert row["state"] == "STOPPED", row
    assert (run / "state" / "final").read_text() == "stopped\n"
    last = _iteration(read_metrics, run)
    assert last == 9 and int(tracker.read_text()) == last  # the exit trigger is read at the next iteration
    assert harness.active_jobs() == []


SELF_STOP_HOOK = """\
# Test-only (written by test_slurm_training.py): rank 1 SIGSTOPs itself once, before iteration 7, so the hang comes
# after the checkpoint at 4 however fast the machine is. The marker file keeps the restart from stopping again.
import os

if os.environ.get("RANK") == "1" and os.environ.get("MTK_TEST_STOP_MARK"):
    import signal

    import mtk.training.loop as _loop

    _original = _loop.Trainer.train_step

    def _train_step(self):
        mark = os.environ["MTK_TEST_STOP_MARK"]
        if self.iteration == 6 and not os.path.exists(mark):
            open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGSTOP)
        return _original(self)

    _loop.Trainer.train_step = _train_step
"""


def test_sigstop_of_one_rank_hangs_excludes_its_node_and_resumes(harness, mtk_venv, reference, read_metrics):
    """The hang watchdog on the three-node cluster: rank 1 (second node) is SIGSTOPped after the checkpoint at 4;
    the job ends with exit 45 and the watchdog's verdict, every rank's stacks are in debug/, the restart runs without
    that node (preflight first) and the losses after the resume are the uninterrupted run's."""
    import json

    from mtk import exitcodes, run_layout

    timeout = 20
    hook = harness.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SELF_STOP_HOOK)
    mark = harness.root / "stopped.mark"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
           "MTK_TEST_STOP_MARK": str(mark)}
    run = harness.launch(harness.spec("ft", train=FT_TRAIN), f"cluster.slurm.venv={mtk_venv}",
                         f"resilience.watchdog.step_timeout={timeout}", "resilience.watchdog.interval=1", env=env)
    job = harness.run_record(run)["ids"]["train"]
    harness.wait("rank 1 to stop itself", mark.exists, timeout=900)
    harness.wait("the hang to be detected", lambda: "excluding node" in (run / "state" / "events.log").read_text(),
                 timeout=300)
    hang = json.loads((run / run_layout.HANG_FILE).read_text())
    rows = harness.wait("the replacement job to complete", lambda: len(r := harness.polled_status(run)) >= 2
                        and r[-1]["state"] == "COMPLETED" and r, timeout=900)
    assert rows[0]["id"] == job and rows[0]["exit_code"] == exitcodes.HANG, rows
    # Exit 45 with the watchdog's verdict file: gloo's own timeout (600 s) writes no verdict and exits otherwise.
    first_nodes = (run / "state" / f"nodes.{job}").read_text().split()
    assert hang["blamed_hosts"] == [first_nodes[1]] and hang["blamed_ranks"] == [1], hang
    for rank, node in ((0, first_nodes[0]), (1, first_nodes[1])):
        stacks = (run / "debug" / f"stacks-{node}-rank{rank}.txt").read_text()
        assert 'File "' in stacks, f"no stacks from rank {rank} on {node}"
    second_nodes = (run / "state" / f"nodes.{rows[-1]['id']}").read_text().split()
    assert first_nodes[1] not in second_nodes and len(second_nodes) == 2
    assert "preflight passed" in (run / "state" / "events.log").read_text()
    second_log = (run / "logs" / f"train-{rows[-1]['id']}.out").read_text()
    assert "[checkpoint] resumed from" in second_log and "at iteration 4" in second_log
    losses = read_metrics(run)  # the last record of an iteration wins: the resumed run's values
    assert sorted(losses) == sorted(reference)
    assert all(close(losses[i], reference[i]) for i in reference), (losses, reference)
