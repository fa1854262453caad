"""`mtk status`'s progress line: the run's iteration of its total, the ETA while it runs (the same numbers as
`mtk ls`, from launcher/runtable.progress), a no-op relaunch said as such, nothing before the first iteration."""

from __future__ import annotations

from mtk.launcher.cli.status import _progress_line, _train_progress


def test_progress_line_running_done_noop_and_not_started():
    running = {"iteration": 12, "total": 30, "eta_s": 95.0, "no_op": False}
    assert _progress_line(running, "RUNNING") == "iteration 12/30, ETA 1m at the recent pace"
    assert _progress_line({**running, "iteration": 30, "eta_s": None}, "COMPLETED") == "iteration 30/30"
    assert _progress_line({"iteration": 7, "total": None, "eta_s": None}, "FAILED") == "iteration 7/?"
    noop = {"iteration": 40, "total": 40, "eta_s": None, "no_op": True,
            "note": "trained nothing: its checkpoint was already at iteration 40"}
    assert _progress_line(noop, "COMPLETED") == \
        "iteration 40 (trained nothing: its checkpoint was already at iteration 40)"
    assert _progress_line({"total": 30, "eta_s": None, "no_op": False}, "PENDING") == ""


def test_train_progress_keys_are_ls_json_names():
    p = {"iteration": 3, "total": 9, "eta_s": 12.5, "no_op": False, "loss": 4.2, "restarts": 0}
    assert _train_progress(p) == {"iteration": 3, "total": 9, "eta_s": 12.5, "no_op": False}
