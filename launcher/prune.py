"""What ``mtk prune`` may remove: previews and ended runs past an age, never a live run or a checkpoint another
run still uses.

A run's state is the one ``mtk ls`` shows (its backend's answer): only COMPLETED, FAILED, CANCELLED and STOPPED
runs have ended; RUNNING, PENDING and UNKNOWN (a cluster out of reach) are never touched. A run dir holding the
checkpoint dir that a kept run resumes from (``train.checkpoint.dir`` pointing inside it) is kept, and said
why. The shared ``<runs_dir>/<name>/checkpoints`` of a job name is no run dir and is never a candidate.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mtk import run_layout
from mtk.checkpoint_paths import checkpoint_dir
from mtk.exitcodes import BadInput
from mtk.steps import StepState

from .runtable import RunRow

ENDED = {StepState.COMPLETED, StepState.FAILED, StepState.CANCELLED, StepState.STOPPED}
PREVIEW = "RENDERED"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class BadDuration(BadInput, ValueError):
    """A --older-than value that is no duration: named with the fix (exit 2)."""


def parse_duration(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``0s`` → seconds."""
    found = _DURATION.match(text.strip())
    if not found:
        raise BadDuration(f"--older-than {text!r}: write a number and a unit, s, m, h or d (e.g. 7d, 12h)")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


@dataclass(frozen=True)
class Decision:
    row: RunRow
    path: Path  # what would be removed: the run dir as this machine sees it
    remove: bool
    why: str


def local_dir(row: RunRow, runs_dir: Path) -> Path:
    """The run's folder under ``runs_dir`` on this machine (an EKS run dir is a pod path; its record is here)."""
    return runs_dir.absolute() / row.name


def _checkpoints_of(path: Path) -> Path | None:
    try:
        job = json.loads((path / run_layout.JOB_FILE).read_text())
        configured = job["train"]["checkpoint"].get("dir")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Path(os.path.abspath(checkpoint_dir(configured, path)))


def _ago(seconds: float) -> str:
    """An age in the unit that says it: 45 s, 12 min, 5 h, 3 d (whole units, rounded down)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{max(0, int(seconds))} s"


def plan(rows: list[RunRow], runs_dir: Path, older_than_s: float, previews: bool, now: float) -> list[Decision]:
    """One decision per run listed: removed or kept, and why. A run's age is since it started (what ``mtk ls``
    shows and --older-than's help says), said in the unit that reads."""
    decisions = []
    for r in rows:
        path = local_dir(r, runs_dir)
        age = now - (r.started or now)
        if r.state == PREVIEW:
            ok, why = previews, "a preview (render/--dry-run)" if previews else "a preview; --no-previews keeps it"
        elif r.state not in ENDED:
            ok, why = False, f"{r.state}: only an ended run is removed"
        elif age < older_than_s:
            ok, why = False, f"{r.state}, started {_ago(age)} ago: newer than --older-than ({_ago(older_than_s)})"
        else:
            ok, why = True, f"{r.state}, started {_ago(age)} ago"
        decisions.append(Decision(r, path, ok, why))
    kept = [d for d in decisions if not d.remove]
    used = {c: d.row.name for d in kept if (c := _checkpoints_of(d.path)) is not None}
    out = []
    for d in decisions:
        inside = [(c, name) for c, name in used.items() if d.remove and (c == d.path or d.path in c.parents)]
        if inside:
            d = Decision(d.row, d.path, False, f"holds the checkpoint dir {inside[0][0]} that {inside[0][1]} uses")
        out.append(d)
    return out


def remove(decision: Decision, runs_dir: Path) -> None:
    """Delete one run dir; only ever a direct child of ``runs_dir`` (nothing a record points elsewhere)."""
    path = decision.path
    if path.parent != runs_dir.absolute() or not path.is_dir() or path.is_symlink():
        raise RuntimeError(f"refusing to remove {path}: not a run dir directly under {runs_dir}")
    shutil.rmtree(path)
