"""One verdict per attempt: the judge's ``state/hang.json`` wins, the other monitors adopt it, and ranks go quiet
once their monitor has copied it beside their heartbeats (a stopped rank woken to dump its stacks must not look
alive and shift the blame)."""

from __future__ import annotations

import json
import threading
import time

from mtk.training import watchdog
from mtk.training.watchdog import HangMonitor, HangVerdict, Heartbeat, read_verdict, verdict_from

from mtk import run_layout
from mtk.spec.resilience import WatchdogSpec

BLAMED = [{"rank": 1, "host": "pod-1", "node": "node-b", "pid": 7, "phase": "step", "iteration": 7,
           "silent_s": 12.0, "no_progress_s": 15.0, "timeout_s": 15.0}]


def _write_verdict(run_dir, at: float) -> None:
    (run_dir / "state").mkdir(parents=True, exist_ok=True)
    data = {**HangVerdict(blamed=BLAMED, overdue=[0, 1], reason="rank 1 went silent").to_json(), "time": at}
    (run_dir / run_layout.HANG_FILE).write_text(json.dumps(data))


def test_a_verdict_from_an_earlier_attempt_is_ignored(tmp_path):
    _write_verdict(tmp_path, at=100.0)
    assert read_verdict(tmp_path, since=200.0) is None
    assert read_verdict(tmp_path, since=50.0).hosts == ["node-b"]


def test_a_monitor_adopts_the_verdict_another_node_declared_and_does_not_rewrite_it(tmp_path):
    spec = WatchdogSpec(interval=0.05)
    monitor = HangMonitor(tmp_path, spec)
    # Every rank looks alive and on time, rank 0 among them (this node judges): judged alone, it would find
    # nothing (or blame the wrong ranks).
    monitor.local.mkdir(parents=True)
    now = time.time()
    try:
        for rank in (0, 1):
            (monitor.local / f"rank{rank}.json").write_text(json.dumps(
                {"rank": rank, "host": f"pod-{rank}", "pid": 1, "phase": "step", "iteration": 7, "progress": now,
                 "deadline": now + 3600, "alive": now + 10, "interval": 0.05, "timeout": 3600}))
        _write_verdict(tmp_path, at=time.time())
        before = (tmp_path / run_layout.HANG_FILE).read_text()
        verdict = monitor.watch()
        assert [b["rank"] for b in verdict.blamed] == [1] and verdict.hosts == ["node-b"]
        monitor.record(HangVerdict(blamed=[{**BLAMED[0], "rank": 0, "node": "node-a"}], reason="other"))
        assert (tmp_path / run_layout.HANG_FILE).read_text() == before
    finally:
        monitor.stop()


def _wait(what: str, predicate, timeout: float = 60.0) -> None:
    """Poll for an event; the deadline only fails a hung test."""
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_ranks_stop_publishing_once_a_hang_is_declared(tmp_path, monkeypatch):
    """Events, not sleeps: the publisher's verdict checks are counted (each loop turn reads the verdict, then
    publishes or not), and the flight-recorder dump marks the turn that saw the verdict. The verdict reaches the
    rank the way it does in a run: another node's judge writes state/hang.json, this node's monitor adopts it and
    copies it beside its ranks' heartbeats."""
    checks = []
    noticed = threading.Event()
    monkeypatch.setattr(watchdog, "verdict_from", lambda *a, **k: checks.append(1) or verdict_from(*a, **k))
    monkeypatch.setattr(watchdog, "dump_flight_recorder", lambda *a: noticed.set())
    spec = WatchdogSpec(interval=0.05)
    beat = Heartbeat(tmp_path, rank=3, spec=spec)
    monitor = HangMonitor(tmp_path, spec)
    beat.start()
    try:
        path = beat.path
        assert not str(path).startswith(str(tmp_path)), "a rank's heartbeat must stay on its node"
        first = json.loads(path.read_text())["alive"]  # start() publishes once
        _wait("a second publish", lambda: json.loads(path.read_text())["alive"] != first)
        _write_verdict(tmp_path, at=time.time())
        monitor.record(monitor.poll())
        _wait("the publisher to see the verdict", noticed.is_set)
        quiet = path.read_text()
        seen = len(checks)
        _wait("three more publisher turns", lambda: len(checks) >= seen + 3)
        assert path.read_text() == quiet, "a rank published after the verdict"
    finally:
        beat.stop()
        monitor.stop()
