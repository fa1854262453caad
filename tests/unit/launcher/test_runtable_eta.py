"""`mtk ls`'s row for a run in progress and for a relaunch that had nothing to do: the ETA is the remaining
iterations at the pace of the last logged ones, and a no-op relaunch says so instead of showing a count."""

from __future__ import annotations

from mtk.launcher.runtable import RunRow, _pace, format_table


def _row(**kw) -> RunRow:
    base = dict(name="tiny-1", backend="local", state="RUNNING", iteration=10, total=40, loss=5.0,
                tokens_per_s=100.0, restarts=0, started=1000.0, run_dir="/r")
    return RunRow(**{**base, **kw})


def test_pace_is_seconds_per_iteration_over_the_recent_window():
    live = [{"iteration": i, "time": 100.0 + 2.0 * i} for i in range(1, 6)]
    assert _pace(live) == 2.0
    slower = live + [{"iteration": i, "time": 110.0 + 4.0 * (i - 5)} for i in range(6, 40)]
    assert _pace(slower) == 4.0  # the last 20 iterations only
    assert _pace(live[:1]) is None and _pace([{"iteration": 3}, {"iteration": 4}]) is None


def test_table_shows_eta_and_a_no_op_relaunch():
    text = format_table([_row(eta_s=90.0), _row(name="tiny-2", state="COMPLETED", iteration=41, total=40,
                                               no_op=True, eta_s=None)], now=2000.0)
    head, running, noop = text.splitlines()
    assert head.split()[:5] == ["NAME", "BACKEND", "STATE", "ITER", "ETA"]
    assert running.split()[3:5] == ["10/40", "1m"]
    assert "41 (nothing to do)" in noop and "41/40" not in noop
