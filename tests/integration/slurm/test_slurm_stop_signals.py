"""Slurm's own stop signals save the run with the default data settings (issue 44): two DataLoader worker processes
per rank, which receive every signal Slurm sends the step (proctrack signals each process of it) and must not take
their rank down mid-save.

* ``scancel JOB``: SIGTERM to every process of the job (then SIGKILL after KillWait): the ranks save the iteration
  in flight and exit 42; a relaunch resumes there.
* the time limit: the batch script asks for ``--signal=B:USR2@<signal_lead>`` (slurm/render.py), so Slurm sends
  SIGUSR2 to the batch shell, which forwards it to every node; ``scancel --signal=USR2 --batch`` delivers exactly
  that signal now instead of minutes before a real limit. The ranks save, the job requeues itself and resumes.

Both are compared loss for loss with an uninterrupted run of the same job.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.faults import Hold

pytestmark = pytest.mark.integration

ITERS, AT = 8, 3  # the signal lands while both ranks wait after AT; they save AT + 1
TRAIN = {"iterations": ITERS, "checkpoint.save_interval": None, "eval_interval": None, "lr_warmup_iters": 2}
DATA = {"num_workers": 2}  # the default (the harness's mock-data spec says 0)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)


def last_exit(run: Path) -> dict:
    return json.loads((run / "state" / "last_exit.json").read_text())


@pytest.fixture(scope="module")
def reference(module_harness, mtk_venv, read_metrics) -> dict[int, float]:
    h = module_harness
    run = h.launch(h.spec("sigref", train=TRAIN, data=DATA), f"cluster.slurm.venv={mtk_venv}")
    h.wait_state(run, {"COMPLETED"}, timeout=600)
    losses = read_metrics(run)
    assert sorted(losses) == list(range(1, ITERS + 1))
    return losses


def _held(h, name: str, mtk_venv) -> tuple[Path, Path, str, Hold]:
    hold = Hold(h.root / f"hold-{name}", after=[AT])
    spec = h.spec(name, train=TRAIN, data=DATA)
    run = h.launch(spec, f"cluster.slurm.venv={mtk_venv}", env=hold.env())
    h.wait(f"both ranks to wait after iteration {AT}", lambda: hold.held(AT, ranks=2), timeout=600)
    return spec, run, h.run_record(run)["ids"]["train"], hold


def test_scancel_saves_the_iteration_in_flight_and_a_relaunch_resumes_there(module_harness, mtk_venv, reference,
                                                                           read_metrics):
    h = module_harness
    spec, run, job, hold = _held(h, "sigcancel", mtk_venv)
    h.slurm("scancel", job)
    # KillWait (5 s on this cluster) runs from here: release at once, so the iteration and the save fit in it
    h.wait("a rank to catch SIGTERM", lambda: hold.signalled(AT), timeout=60, every=0.02)
    hold.release(AT)
    h.wait_state(run, {"CANCELLED"}, timeout=300)
    saved = AT + 1
    last = last_exit(run)
    assert (last["code"], last["iteration"], last["checkpoint_iteration"]) == (42, saved, saved), last
    tracker = h.root / "runs" / "sigcancel" / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert int(tracker.read_text()) == saved
    log = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("train-*.out"))
    assert "Traceback" not in log and "DataLoader worker" not in log and f"saving at iteration {saved}" in log, \
        log[-3000:]
    [row] = [r for r in json.loads(h.mtk("ls", "--json").stdout) if r["run_dir"] == str(run)]
    assert row["state"] == "CANCELLED" and row["iteration"] == saved, row
    # report reads the same as ls: the engine's files say "saved for a requeue" (SIGTERM), sacct says cancelled
    report = h.mtk("report", str(run), "--no-plots", "--no-wandb", "--json")
    assert json.loads(report.stdout)["ended"].startswith(f"CANCELLED at iteration {saved}"), report.stdout

    again = h.launch(spec, f"cluster.slurm.venv={mtk_venv}")
    h.wait_state(again, {"COMPLETED"}, timeout=600)
    losses = read_metrics(again)
    assert sorted(losses) == list(range(saved + 1, ITERS + 1)), "the relaunch did not resume at the saved iteration"
    assert all(close(losses[i], reference[i]) for i in losses), (losses, reference)


def test_time_limit_usr2_saves_requeues_and_resumes_with_equal_losses(module_harness, mtk_venv, reference,
                                                                     read_metrics):
    h = module_harness
    _spec, run, job, hold = _held(h, "sigusr2", mtk_venv)
    assert "#SBATCH --signal=B:USR2@" in (run / "train.sbatch").read_text()  # what the time limit sends
    h.slurm("scancel", "--signal=USR2", "--batch", job)
    h.wait("a rank to catch USR2", lambda: hold.signalled(AT), timeout=120, every=0.05)
    hold.release(AT)
    done = h.wait_state(run, {"COMPLETED"}, timeout=600)
    saved = AT + 1
    assert "restarts=1" in done["reason"], done
    events = (run / "state" / "events.log").read_text()
    assert f"saved checkpoint={saved} on a signal; restarting" in events, events
    log = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("train-*.out"))
    assert "Traceback" not in log and "DataLoader worker" not in log, log[-3000:]
    assert "resumed from" in log and f"at iteration {saved}," in log, log[-3000:]
    losses = read_metrics(run)
    assert sorted(losses) == list(range(1, ITERS + 1))
    assert all(close(losses[i], reference[i]) for i in losses), (losses, reference)
