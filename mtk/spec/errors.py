"""Spec problems: each names the field path, the bad value and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass

from mtk.exitcodes import BadInput


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec."""

    path: str
    message: str
    value: object = None

    def __str__(self) -> str:
        shown = "" if self.value is None else f" (got {self.value!r})"
        return f"{self.path}{shown}: {self.message}"


class SpecError(BadInput, ValueError):
    """A spec that must not reach a cluster. ``problems`` lists every issue found, not just the first."""

    def __init__(self, problems: list[Problem], source: str | None = None):
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid job spec{where}:\n{lines}")
