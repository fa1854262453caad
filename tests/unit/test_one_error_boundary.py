"""One error boundary per program (#43): `mtk` reports expected failures in `LazyGroup.invoke`, `mtk-entrypoint` in
its own main — nowhere else calls mtk.failures.report — and an expected failure is known by its class (a
`UserFacingError` carrying its exit code), never by a duck-typed attribute."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mtk.exitcodes import BadInput, UserFacingError

ROOT = Path(__file__).resolve().parents[1].parent
FOLDERS = ("mtk", "launcher", "training", "data_jobs", "slurm", "k8s", "containers")
BOUNDARIES = {"launcher/cli/__init__.py", "launcher/entrypoint.py"}


def _package_files():
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_only_the_two_programs_boundaries_report_errors():
    callers = set()
    for path in _package_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("mtk.failures", "failures") and any(
                    a.name == "report" for a in node.names):
                callers.add(path.relative_to(ROOT).as_posix())
    assert callers == BOUNDARIES


def test_no_error_is_recognised_by_a_duck_typed_attribute():
    found = [f"{p.relative_to(ROOT)}" for p in _package_files() if re.search(r"\buser_facing\b", p.read_text())]
    assert found == []
    assert issubclass(BadInput, UserFacingError) and BadInput.exit_code == 2
