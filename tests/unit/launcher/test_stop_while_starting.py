"""A stop that lands while a step is starting its child still reaches the child: the local runner's SIGTERM while
it starts a step, and the train step's while it starts torchrun (by default that signal ended the train step and
left torchrun and its ranks running with no one to stop them). The signal is sent from inside Popen's return,
so it lands in exactly that window on any machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def signals_restored():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def _popen_then(monkeypatch, module, signum: int) -> None:
    real = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real(*args, **kwargs)
        os.kill(os.getpid(), signum)  # handled before this returns: the caller has not recorded proc yet
        return proc

    monkeypatch.setattr(module.subprocess, "Popen", popen_then_signal)


def test_a_stop_while_the_runner_starts_a_step_reaches_the_step(tmp_path, monkeypatch, signals_restored):
    from mtk.launcher import local_runner

    from mtk import run_layout

    layout = run_layout.RunLayout.of(tmp_path)
    layout.steps_plan.write_text(json.dumps({"steps": [{"step": "train", "argv": SLEEP},
                                                       {"step": "export", "argv": SLEEP}], "env": {}}))
    _popen_then(monkeypatch, local_runner, signal.SIGTERM)
    assert local_runner.run(tmp_path) == -signal.SIGTERM
    steps = json.loads(layout.steps_state.read_text())["steps"]
    assert steps["train"]["state"] == "CANCELLED" and steps["train"]["exit_code"] == -signal.SIGTERM
    assert steps["export"]["state"] == "CANCELLED" and "pid" not in steps["export"], "nothing started after it"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_train_step_starts_torchrun_stops_it(monkeypatch, signals_restored, signum):
    from mtk.launcher import train_step

    _popen_then(monkeypatch, train_step, signum)
    received: list[int] = []
    agent = train_step.start_agent(SLEEP, received)
    assert agent.wait(timeout=120) == -signal.SIGTERM, "no rank yet, so nothing to save: torchrun is ended"
    assert received == [signal.SIGTERM]
