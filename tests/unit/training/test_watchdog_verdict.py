"""One verdict per attempt: the first node's ``state/hang.json`` wins, later monitors adopt it, and ranks go quiet
once it exists (a stopped rank woken to dump its stacks must not look alive and shift the blame)."""

from __future__ import annotations

import json
import threading
import time

from mtk.training import watchdog
from mtk.training.watchdog import HangMonitor, HangVerdict, Heartbeat, heartbeat_dir, read_verdict

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
    # Every rank looks alive and on time: judged alone, this node would find nothing (or blame the wrong ranks).
    heartbeat_dir(tmp_path).mkdir(parents=True)
    now = time.time()
    for rank in (0, 1):
        (heartbeat_dir(tmp_path) / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "host": f"pod-{rank}", "pid": 1, "phase": "step", "iteration": 7, "progress": now,
             "deadline": now + 3600, "alive": now + 10, "interval": 0.05, "timeout": 3600}))
    _write_verdict(tmp_path, at=time.time())
    before = (tmp_path / run_layout.HANG_FILE).read_text()
    verdict = monitor.watch()
    assert [b["rank"] for b in verdict.blamed] == [1] and verdict.hosts == ["node-b"]
    monitor.record(HangVerdict(blamed=[{**BLAMED[0], "rank": 0, "node": "node-a"}], reason="other"))
    assert (tmp_path / run_layout.HANG_FILE).read_text() == before


def _wait(what: str, predicate, timeout: float = 60.0) -> None:
    """Poll for an event; the deadline only fails a hung test."""
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_ranks_stop_publishing_once_a_hang_is_declared(tmp_path, monkeypatch):
    """Events, not sleeps: the publisher's verdict checks are counted (each loop turn reads the verdict, then
    publishes or not), and the flight-recorder dump marks the turn that saw the verdict."""
    checks = []
    noticed = threading.Event()
    monkeypatch.setattr(watchdog, "read_verdict", lambda *a, **k: checks.append(1) or read_verdict(*a, **k))
    monkeypatch.setattr(watchdog, "dump_flight_recorder", lambda *a: noticed.set())
    beat = Heartbeat(tmp_path, rank=0, spec=WatchdogSpec(interval=0.05))
    beat.start()
    try:
        path = heartbeat_dir(tmp_path) / "rank0.json"
        first = json.loads(path.read_text())["alive"]  # start() publishes once
        _wait("a second publish", lambda: json.loads(path.read_text())["alive"] != first)
        _write_verdict(tmp_path, at=time.time())
        _wait("the publisher to see the verdict", noticed.is_set)
        quiet = path.read_text()
        seen = len(checks)
        _wait("three more publisher turns", lambda: len(checks) >= seen + 3)
        assert path.read_text() == quiet, "a rank published after the verdict"
    finally:
        beat.stop()
