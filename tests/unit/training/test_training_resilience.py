"""The watchdog's verdicts, its derived timeouts and the straggler summary, on hand-made records."""

from __future__ import annotations

import pytest
from mtk.training.stragglers import StragglerStats, describe, summarize
from mtk.training.watchdog import Timeouts, judge

from mtk.spec.resilience import StragglerSpec, WatchdogSpec


def beat(rank, phase="step", iteration=10, progress=100.0, timeout=20.0, alive=100.0, host="n1"):
    return {"rank": rank, "host": host, "pid": 1000 + rank, "phase": phase, "iteration": iteration,
            "progress": progress, "deadline": None if phase == "done" else progress + timeout, "alive": alive,
            "interval": 1.0, "timeout": timeout}


def test_no_verdict_while_every_deadline_is_ahead():
    assert judge([beat(0), beat(1)], now=119.0) is None


def test_the_silent_rank_is_blamed_not_the_peers_waiting_for_it():
    recs = [beat(0, alive=130.0), beat(1, alive=104.0, host="n2"), beat(2, alive=130.0)]
    verdict = judge(recs, now=130.0)
    assert [b["rank"] for b in verdict.blamed] == [1]
    assert verdict.hosts == ["n2"] and verdict.overdue == [0, 1, 2]
    assert "stopped publishing" in verdict.reason


def test_all_alive_blames_the_ranks_furthest_behind():
    recs = [beat(0, iteration=11, alive=130.0, progress=105.0), beat(1, iteration=10, alive=130.0)]
    verdict = judge(recs, now=130.0)
    assert [b["rank"] for b in verdict.blamed] == [1] and "furthest behind" in verdict.reason


def test_finished_ranks_are_never_blamed():
    recs = [beat(0, phase="done", alive=50.0), beat(1, alive=130.0)]
    assert [b["rank"] for b in judge(recs, now=130.0).blamed] == [1]


def test_timeouts_follow_measurements_and_overrides():
    t = Timeouts(WatchdogSpec(factor=4, min_timeout=10, startup_timeout=300))
    assert t.timeout("step") == 300  # nothing measured yet
    t.observe("step", 1.0)
    assert t.timeout("step") == 10  # 4 × 1 s is below the floor
    t.observe("step", 5.0)
    t.observe("step", 2.0)
    assert t.timeout("step") == 20  # the slowest step counts
    assert Timeouts(WatchdogSpec(step_timeout=7)).timeout("step") == 7


def test_summary_names_the_slow_rank_and_its_node():
    rec = summarize(50, step_s=[1.0, 1.0, 1.0, 1.0], forward_s=[0.2, 0.21, 0.6, 0.19], threshold=1.3,
                    hosts={0: "a", 1: "a", 2: "b", 3: "b"})
    assert rec["stragglers"] == [2]
    assert rec["slowest_ranks"][0] == {"rank": 2, "host": "b", "forward_ms": 600.0, "step_ms": 1000.0,
                                       "ratio": pytest.approx(0.6 / 0.205, rel=1e-3)}
    assert rec["slowest_nodes"][0]["host"] == "b"
    assert describe(rec).startswith("rank 2 (b) 2.93x")
    even = summarize(50, [1.0] * 4, [0.2, 0.2, 0.21, 0.2], 1.3, {})
    assert even["stragglers"] == [] and describe(even) is None


def test_payload_only_every_interval_and_only_own_slots():
    stats = StragglerStats(StragglerSpec(interval=2), "/nonexistent", rank=1, world=3)
    timed = stats.wrap(lambda: None)
    timed()
    assert stats.payload(1, 0.5) == []
    vec = stats.payload(2, 1.5)
    assert len(vec) == 6 and vec[1] == 1.0 and vec[0] == vec[2] == vec[3] == vec[5] == 0.0 and vec[4] > 0
    assert StragglerStats(StragglerSpec(), "/x", 0, 1).payload(50, 1.0) == []  # one rank: nothing to compare
