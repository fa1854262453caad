"""Read ``metrics.jsonl`` tolerantly and split it into the segments a resumed run leaves behind.

The engine (``mtk.training.metrics``) appends one JSON object per line: train records (``kind`` "train" or
absent) and eval records (``kind`` "eval"). A run that resumes from an earlier checkpoint appends again, so
iterations after that checkpoint appear twice. Here a *restart* is a train record whose iteration does not
move forward, or whose ``restart_count`` changed; the iterations redone are counted from the resume point,
estimated as (first iteration logged after the restart − log interval). That is exact when checkpoints fall on
multiples of the log interval (always true with ``train.log_interval: 1``).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtk.exitcodes import UserFacingError

Record = dict[str, Any]


class NoMetrics(UserFacingError, FileNotFoundError):
    """A run (or a job's launches) with no train records to report yet: the message says why (exit 1)."""


@dataclass
class Restart:
    """One resume: training went back to ``resume_iteration`` after having logged ``previous_iteration``."""

    line: int
    previous_iteration: int
    resume_iteration: int
    first_iteration: int
    run: str = ""  # in a job's history: the run dir whose launch this resume began ("" within one run dir)

    @property
    def lost(self) -> int:
        return max(0, self.previous_iteration - self.resume_iteration)


@dataclass
class Metrics:
    """Everything read from one metrics file, in file order, plus what had to be skipped."""

    train: list[Record] = field(default_factory=list)
    eval: list[Record] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    stragglers: list[Record] = field(default_factory=list)
    log_interval: int = 1
    notes: list[str] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)  # a job's history: each run dir's part, oldest first

    @property
    def iterations_lost(self) -> int:
        return sum(r.lost for r in self.restarts)

    def timeline(self) -> tuple[list[Record], list[Record]]:
        """(records of the final lineage sorted by iteration, records superseded by a restart)."""
        live: dict[int, Record] = {}
        superseded: list[Record] = []
        cuts = {r.line: r.resume_iteration for r in self.restarts}
        for rec in self.train:
            if rec["_line"] in cuts:
                resume = cuts[rec["_line"]]
                for it in [i for i in live if i > resume]:
                    superseded.append(live.pop(it))
            if rec["iteration"] in live:
                superseded.append(live[rec["iteration"]])
            live[rec["iteration"]] = rec
        return [live[i] for i in sorted(live)], sorted(superseded, key=lambda r: r["_line"])

    def eval_timeline(self) -> tuple[list[Record], list[Record]]:
        """(eval records kept, eval records a later restart went back before), each in file order."""
        kept: list[Record] = []
        dropped: list[Record] = []
        for rec in self.eval:
            gone = any(r.line > rec["_line"] and r.resume_iteration < rec["iteration"] for r in self.restarts)
            (dropped if gone else kept).append(rec)
        return kept, dropped

    def values(self, key: str, records: list[Record] | None = None) -> list[tuple[int, float]]:
        """(iteration, value) for records that carry a finite number under ``key``."""
        out = []
        for rec in self.train if records is None else records:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.append((rec["iteration"], float(v)))
        return out


def _parse(lines: list[str], notes: list[str]) -> list[Record]:
    records: list[Record] = []
    bad: list[int] = []
    for n, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError:
            if n == len(lines) and not raw.endswith("\n"):
                notes.append(f"ignored a truncated last line ({len(text)} characters, line {n}): "
                             "the writer stopped mid-line, e.g. a crash")
            else:
                bad.append(n)
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("iteration"), int) or isinstance(
                rec.get("iteration"), bool):
            bad.append(n)
            continue
        rec["_line"] = n
        records.append(rec)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        notes.append(f"ignored {len(bad)} line(s) that are not a JSON object with an integer 'iteration': {shown}")
    return records


def _infer_log_interval(train: list[Record]) -> int:
    gaps = [b["iteration"] - a["iteration"] for a, b in itertools.pairwise(train)
            if b["iteration"] > a["iteration"] and b.get("restart_count") == a.get("restart_count")]
    return max(1, int(statistics.median(gaps))) if gaps else 1


def _find_restarts(train: list[Record], interval: int) -> list[Restart]:
    restarts = []
    for prev, rec in itertools.pairwise(train):
        backwards = rec["iteration"] <= prev["iteration"]
        requeued = rec.get("restart_count") != prev.get("restart_count")
        if backwards or requeued:
            resume = max(0, rec["iteration"] - interval)
            restarts.append(Restart(rec["_line"], prev["iteration"], resume, rec["iteration"]))
    return restarts


def read_metrics(path: str | Path, log_interval: int | None = None) -> Metrics:
    """Parse ``path``; ``log_interval`` (from the job spec) overrides the interval inferred from the file."""
    path = Path(path)
    notes: list[str] = []
    text = path.read_text(errors="replace")
    return _split(_parse(text.splitlines(keepends=True), notes), log_interval, notes)


def _split(records: list[Record], log_interval: int | None, notes: list[str]) -> Metrics:
    """Records by kind, with the restarts found among the train records."""
    train = [r for r in records if r.get("kind", "train") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    stragglers = [r for r in records if r.get("kind") == "stragglers"]
    other = len(records) - len(train) - len(evals) - len(stragglers)
    if other:
        notes.append(f"ignored {other} record(s) of an unknown kind")
    interval = log_interval or _infer_log_interval(train)
    return Metrics(train=train, eval=evals, restarts=_find_restarts(train, interval), stragglers=stragglers,
                   log_interval=interval, notes=notes)


def read_history(paths: list[tuple[str, Path]], log_interval: int | None = None) -> Metrics:
    """The ``metrics.jsonl`` of each run dir of one job (``(run name, path)``, oldest launch first) as one file
    would read: lines numbered on across files, so a resume within a run and a relaunch both become restarts.
    A relaunch that went on where the last run stopped (iteration 31 after 30) is a restart too, losing nothing:
    every run boundary is marked."""
    notes: list[str] = []
    records: list[Record] = []
    starts: dict[int, str] = {}  # line of a run's first train record -> its run name
    runs: list[dict] = []
    offset = 0
    for name, path in paths:
        own: list[str] = []
        lines = Path(path).read_text(errors="replace").splitlines(keepends=True)
        parsed = _parse(lines, own)
        notes += [f"{name}: {n}" for n in own]
        for rec in parsed:
            rec["_line"] += offset
            rec["_run"] = name
        offset += len(lines)
        train = [r for r in parsed if r.get("kind", "train") == "train"]
        if train:
            starts[train[0]["_line"]] = name
        runs.append({"run": name, "train_records": len(train),
                     "first_iteration": train[0]["iteration"] if train else None,
                     "last_iteration": train[-1]["iteration"] if train else None})
        records += parsed
    metrics = _split(records, log_interval, notes)
    found = {r.line: r for r in metrics.restarts}
    by_line = {r["_line"]: (i, r) for i, r in enumerate(metrics.train)}
    for line, name in starts.items():
        i, rec = by_line[line]
        if i == 0:
            continue
        restart = found.get(line) or Restart(line, metrics.train[i - 1]["iteration"],
                                             max(0, rec["iteration"] - metrics.log_interval), rec["iteration"])
        restart.run = name
        found[line] = restart
    metrics.restarts = sorted(found.values(), key=lambda r: r.line)
    metrics.runs = runs
    return metrics
