"""Exit codes have one home (mtk/exitcodes.py) and so does the mark of an expected failure: an exception the user
sees as one line is a ``UserFacingError`` (bad input: ``BadInput``) carrying its exit code, recognised by its class,
never by a duck-typed attribute; the boundary exits with that code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mtk import exitcodes
from mtk.backends import LogsError, UnknownBackend, backend_class
from mtk.exitcodes import BadInput, UserFacingError
from mtk.failures import classify

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("mtk", "launcher", "training", "data_jobs", "slurm", "k8s", "containers")
CODE_NAMES = {"OK", "FAILED", "USAGE", "BAD_INPUT", "INTERRUPTED", "WAIT_TIMEOUT", "REQUEUE", "STOPPED", "GUARDRAIL",
              "HANG", "PREFLIGHT"}


def _package_files() -> list[Path]:
    return sorted(p for folder in PACKAGE for p in (ROOT / folder).rglob("*.py"))


def test_no_class_marks_itself_user_facing_by_attribute():
    marked = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in _package_files()
              for node in ast.walk(ast.parse(p.read_text(), str(p)))
              if isinstance(node, ast.ClassDef) for stmt in node.body
              if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "user_facing"
                                                      for t in stmt.targets)]
    assert marked == [], "subclass mtk.exitcodes.UserFacingError (or BadInput) instead of user_facing = True"


def test_the_shared_exit_codes_are_assigned_only_in_exitcodes():
    elsewhere = [f"{p.relative_to(ROOT)}:{node.lineno} {t.id}" for p in _package_files()
                 if p != ROOT / "mtk" / "exitcodes.py"
                 for node in ast.parse(p.read_text(), str(p)).body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and t.id in CODE_NAMES]
    assert elsewhere == []


def test_the_boundary_exits_with_the_code_the_error_carries():
    assert classify(BadInput("bad")) == (exitcodes.USAGE, "bad") == (2, "bad")
    from mtk.spec.errors import Problem, SpecError

    spec = SpecError([Problem("model.hidden_size", "must be positive")], "job.yaml")
    assert classify(spec) == (2, "invalid job spec in job.yaml:\n  - model.hidden_size: must be positive")
    assert classify(UserFacingError("failed")) == (exitcodes.FAILED, "failed")
    from mtk.k8s.backend import NoPods
    from mtk.k8s.launch_wait import StoppedWaiting

    assert classify(NoPods("no pods")) == (exitcodes.FAILED, "no pods")  # a FileNotFoundError, but carries its own
    assert classify(StoppedWaiting("stopped", 7)) == (7, "stopped")  # an instance's code wins
    assert classify(KeyboardInterrupt()) == (exitcodes.INTERRUPTED, "interrupted")
    with pytest.raises(UnknownBackend) as err:
        backend_class("nope")
    assert classify(err.value)[0] == 2 and isinstance(err.value, KeyError)  # KeyError callers still catch it


def test_one_logs_error_for_every_backend():
    from mtk.launcher.local import _check_logs_filter
    from mtk.slurm import logfiles

    with pytest.raises(LogsError, match="--step 'nope': this run has train"):
        _check_logs_filter({"steps": [{"step": "train"}]}, "nope", None, None)
    with pytest.raises(LogsError, match="--node 'n9': not one of this job's nodes"):
        logfiles.node_index("n9", ["n1", "n2"])
    assert issubclass(LogsError, BadInput)
