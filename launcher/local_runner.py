"""Runs a local run's steps one after another, detached from the shell that launched it.

``mtk launch --backend local`` starts ``python -m mtk.launcher.local_runner RUN_DIR`` in its own session so
the run survives the terminal; ``mtk status/logs/cancel`` read ``state/steps.json`` and ``logs/<step>.log``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from mtk import exitcodes, run_layout, run_outcome
from mtk.files import atomic_write, open_append
from mtk.steps import StepState


def read_state(run_dir: str | Path) -> dict:
    try:
        return json.loads(run_layout.RunLayout.of(run_dir).steps_state.read_text())
    except (OSError, ValueError):
        return {}


def _save(run_dir: Path, state: dict) -> None:
    atomic_write(run_layout.RunLayout.of(run_dir).steps_state, json.dumps(state, indent=2, sort_keys=True) + "\n")


def _resolve(argv: list[str]) -> list[str]:
    """Run ``mtk-entrypoint`` with this interpreter when the console script is not on PATH."""
    if argv[0] == "mtk-entrypoint" and not shutil.which("mtk-entrypoint"):
        return [sys.executable, "-m", "mtk.launcher.entrypoint", *argv[1:]]
    return argv


def _step_state(rc: int, cancelled: bool) -> StepState:
    """A step's end as ``mtk status`` shows it; 43 is the engine's "stopped as asked" (``mtk stop``), not a
    failure."""
    if cancelled:
        return StepState.CANCELLED
    if rc == exitcodes.STOPPED:
        return StepState.STOPPED
    return StepState.COMPLETED if rc == 0 else StepState.FAILED


def _stop_step(current: dict) -> None:
    """SIGTERM, once, to the running step: its "save and stop", whichever of the two reached the runner."""
    proc = current.get("proc")
    if proc and proc.poll() is None and current.get("stopped") != proc.pid:
        current["stopped"] = proc.pid
        proc.send_signal(signal.SIGTERM)


def run(run_dir: Path) -> int:
    plan = json.loads(run_layout.RunLayout.of(run_dir).steps_plan.read_text())
    state: dict = {"runner_pid": os.getpid(), "steps": {s["step"]: {"state": StepState.PENDING} for s in plan["steps"]}}
    _save(run_dir, state)
    current: dict = {}

    def stop(_signum, _frame):
        current["cancelled"] = True
        _stop_step(current)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    env = {**os.environ, **plan.get("env", {})}
    rc = 0
    for step in plan["steps"]:
        name = step["step"]
        entry = state["steps"][name]
        if current.get("cancelled") or rc != 0:
            why = "the run was stopped (mtk stop)" if rc == exitcodes.STOPPED else "an earlier step did not complete"
            entry.update(state=StepState.CANCELLED, reason=why if rc else "cancelled")
            if rc == exitcodes.STOPPED:
                entry["needed"] = False  # left unrun by a stop: the run is STOPPED, not CANCELLED
            continue
        log = run_dir / run_layout.LOGS_DIR / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open_append(log, binary=True, buffering=0) as out:  # never through a link planted in the run dir
            proc = subprocess.Popen(_resolve(step["argv"]), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=run_dir)
            current["proc"] = proc
            if current.get("cancelled"):  # the stop came while the step was starting: it still reaches it
                _stop_step(current)
            entry.update(state=StepState.RUNNING, pid=proc.pid, started=time.time(), log=str(log))
            _save(run_dir, state)
            rc = proc.wait()
        entry.update(ended=time.time(), exit_code=rc, state=_step_state(rc, bool(current.get("cancelled"))))
        if entry["state"] == StepState.STOPPED:
            entry["reason"] = run_outcome.stopped_reason(run_dir)
        elif entry["state"] == StepState.CANCELLED:
            # The engine saved on the forwarded SIGTERM (exit 42): the run reads CANCELLED everywhere, report too.
            saved = run_outcome.record_cancelled(run_dir) if rc == exitcodes.REQUEUE else None
            entry["reason"] = run_outcome.cancelled_reason(saved)
        _save(run_dir, state)
    state["done"] = True
    _save(run_dir, state)
    return rc


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
