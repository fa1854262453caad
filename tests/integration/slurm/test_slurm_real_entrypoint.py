"""The batch script's restart paths with the REAL ``mtk-entrypoint`` (short CPU training runs on the test cluster),
where test_slurm_chain.py proves them quickly with a stand-in: the singleton successor queued and cancelled by the
exit trigger (exit 43), the successor resuming after a crash, the guardrail, too few healthy nodes after the real
preflight; and a launch with the megatron-core check on (the harness turns it off elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.faults import Hold

from mtk import exitcodes

pytestmark = pytest.mark.integration

TRAIN = {"iterations": 12, "checkpoint.save_interval": 4, "eval_interval": None, "lr_warmup_iters": 2}

CRASH_HOOK = """\
# Test-only (written by test_slurm_real_entrypoint.py): rank 0 raises at iteration MTK_TEST_CRASH_AT; with
# MTK_TEST_CRASH_MARK only once (the mark file remembers), otherwise on every attempt.
import os

if os.environ.get("RANK") == "0" and os.environ.get("MTK_TEST_CRASH_AT"):
    import mtk.training.loop as _loop

    _original = _loop.Trainer.train_step

    def _train_step(self):
        mark = os.environ.get("MTK_TEST_CRASH_MARK")
        if self.iteration == int(os.environ["MTK_TEST_CRASH_AT"]) and not (mark and os.path.exists(mark)):
            if mark:
                open(mark, "w").close()
            raise RuntimeError("injected crash (test hook)")
        return _original(self)

    _loop.Trainer.train_step = _train_step
"""


def _crash_env(harness, at: int, once: bool) -> dict[str, str]:
    hook = harness.root / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(CRASH_HOOK)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
           "MTK_TEST_CRASH_AT": str(at)}
    if once:
        env["MTK_TEST_CRASH_MARK"] = str(harness.root / "crashed.mark")
    return env


def _launch_checked(harness, spec: Path, *sets: str, check: bool = True, env: dict | None = None):
    """`mtk launch` with the megatron-core check ON (the default for slurm): no --no-megatron-check."""
    args = ["launch", str(spec), "--backend", "slurm"]
    for s in sets:
        args += ["--set", s]
    return harness.mtk(*args, check=check, timeout=600, env=env)


def test_megatron_check_on_refuses_before_queueing(harness, mtk_venv):
    out = _launch_checked(harness, harness.spec("mcheck"), f"cluster.slurm.venv={mtk_venv}",
                          "model.ffn_hidden_size=255", check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "model.ffn_hidden_size" in out.stdout + out.stderr and "megatron-core" in out.stdout + out.stderr
    assert harness.active_jobs() == [] and not (harness.root / "runs" / "mcheck").exists(), "nothing submitted"


def test_singleton_successor_waits_then_exit_43_cancels_it(harness, mtk_venv, read_metrics):
    spec = harness.spec("real43", train={**TRAIN, "iterations": 200, "checkpoint.save_interval": None},
                        cluster={"slurm.singleton": True})
    hold = Hold(harness.root / "hold", after=[2])  # the exit trigger is written while both ranks wait
    out = _launch_checked(harness, spec, f"cluster.slurm.venv={mtk_venv}", env=hold.env())  # megatron-core accepted it
    run = Path(next(ln for ln in out.stdout.splitlines() if ln.startswith("run: ")).removeprefix("run: "))
    rows = harness.wait("a queued successor", lambda: len(r := harness.polled_status(run)) == 2 and r, timeout=300)
    assert rows[1]["state"] == "PENDING" and "Dependency" in rows[1]["reason"], rows
    harness.wait("both ranks to wait after iteration 2", lambda: hold.held(2, ranks=2), timeout=900)
    harness.mtk("stop", str(run))
    hold.release(2)
    done = harness.wait_state(run, {"STOPPED"}, timeout=600)
    assert "stopped by the exit trigger" in done["reason"], done
    rows = harness.wait("the successor cancelled", lambda: (r := harness.polled_status(run))[1]["state"] == "CANCELLED"
                        and r, timeout=300)
    assert rows[0]["exit_code"] == 0 and len(rows) == 2, rows
    assert (run / "state" / "final").read_text() == "stopped\n"
    assert max(read_metrics(run)) == 3  # the exit trigger is read at the first iteration after the release
    harness.wait("the chain to drain", lambda: harness.active_jobs() == [], timeout=120)


def test_singleton_successor_resumes_a_crashed_real_run(harness, mtk_venv, read_metrics):
    spec = harness.spec("realsucc", train=TRAIN, cluster={"slurm.singleton": True, "slurm.max_failures": 3})
    run = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}", env=_crash_env(harness, at=6, once=True))
    first = harness.run_record(run)["ids"]["train"]
    rows = harness.wait("the successor to complete", lambda: len(r := harness.polled_status(run)) >= 2
                        and r[1]["state"] == "COMPLETED" and r, timeout=1500)
    assert rows[0]["id"] == first and rows[0]["state"] == "FAILED", rows
    assert "injected crash" in (run / "logs" / f"train-{first}.out").read_text()
    first_log = (run / "logs" / f"train-{first}.out").read_text()
    assert "the queued successor job resumes" in first_log and "requeueing" not in first_log
    second_log = (run / "logs" / f"train-{rows[1]['id']}.out").read_text()
    assert "[checkpoint] resumed from" in second_log and "at iteration 4" in second_log
    assert sorted(read_metrics(run)) == list(range(1, 13))


def test_guardrail_stops_a_real_run_that_keeps_crashing(harness, mtk_venv):
    spec = harness.spec("realguard", train=TRAIN, cluster={"slurm.max_failures": 2})
    run = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}", env=_crash_env(harness, at=1, once=False))
    final = harness.wait("the guardrail", lambda: (s := harness.state(run, polled=True))["state"] == "FAILED"
                         and (run / "state" / "final").exists() and s, timeout=1500)
    assert final["exit_code"] == exitcodes.GUARDRAIL, final
    assert "guardrail: 2 failures in a row without checkpoint progress" in final["reason"]
    log = next((run / "logs").glob("train-*.out")).read_text()
    assert log.count("injected crash") >= 2, "both attempts trained for real and crashed"
    assert (run / "state" / "final").read_text() == "guardrail\n"
    harness.wait("the chain to drain", lambda: harness.active_jobs() == [], timeout=120)


def test_too_few_healthy_nodes_after_the_real_preflight(harness, mtk_venv):
    blocker = harness.root / "not-a-dir"
    blocker.write_text("a file where data.dir's parent should be\n")
    spec = harness.spec("realgate", train=TRAIN)
    run = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}", f"data.dir={blocker / 'data'}",
                         "resilience.preflight.enabled=true")
    harness.wait("the refusal", lambda: (run / "state" / "final").exists() and not harness.active_jobs(),
                 timeout=900)
    assert (run / "state" / "final").read_text() == "preflight\n"
    events = (run / "state" / "events.log").read_text()
    assert "refused: only" in events and "healthy node(s)" in events and "lower cluster.nodes" in events, events
    logs = "".join(p.read_text() for p in (run / "logs").glob("train-*.out"))
    assert "storage: data.dir" in logs and "not writable" in logs, logs[-3000:]
    assert "[mtk] training iterations" not in logs, "training must not start on a failed gate"
