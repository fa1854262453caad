"""How ``mtk ls`` folds a run's step states into one: the rule order, and steps the run ended without needing."""

from __future__ import annotations

import pytest
from mtk.launcher.runtable import fold_states, fold_steps

from mtk.backends import StepStatus


@pytest.mark.parametrize(("states", "run"), [
    (["COMPLETED", "COMPLETED"], "COMPLETED"),
    (["COMPLETED", "STOPPED"], "STOPPED"),
    (["COMPLETED", "STOPPED", "FAILED"], "FAILED"),
    (["STOPPED", "CANCELLED"], "CANCELLED"),
    (["COMPLETED", "RUNNING", "PENDING"], "RUNNING"),
    (["COMPLETED", "PENDING"], "PENDING"),
    (["COMPLETED", "UNKNOWN"], "UNKNOWN"),
    ([], "UNKNOWN"),
])
def test_the_first_matching_rule_wins(states, run):
    assert fold_states(states) == run


def test_a_step_the_run_did_not_need_does_not_count():
    done = StepStatus("train", "COMPLETED", "5")
    spare = StepStatus("train#2", "CANCELLED", "6", reason="not needed: the run completed", needed=False)
    assert fold_steps([done, spare]) == "COMPLETED"
    assert fold_steps([StepStatus("train", "STOPPED", "5"), spare]) == "STOPPED"
    assert fold_steps([done, StepStatus("train#2", "CANCELLED", "6")]) == "CANCELLED"  # one cancel that counts
    assert fold_steps([spare]) == "UNKNOWN"


def test_a_followed_launch_exits_as_the_needed_steps_ended():
    from mtk.launcher.cli.launch import followed_exit_code

    spare = StepStatus("train#2", "CANCELLED", "6", reason="not needed: the run completed", needed=False)
    assert followed_exit_code([StepStatus("train", "COMPLETED", "5"), spare]) == 0
    assert followed_exit_code([StepStatus("train", "STOPPED", "5"), spare]) == 43
    assert followed_exit_code([StepStatus("train", "FAILED", "5", exit_code=1), spare]) == 1
