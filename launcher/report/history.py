"""``mtk report --history``: every launch of one job read as one timeline.

A job launched again resumes from its checkpoint dir (``<runs_dir>/<name>/checkpoints`` unless the spec names
one), but each launch writes a run dir of its own, so one run dir's ``metrics.jsonl`` holds only its part of
the iterations. The runs that share a checkpoint dir are the job's launches; their metrics, oldest launch first,
read as one file (``records.read_history``): iterations 1..N on one axis, each relaunch marked as a restart.
"""

from __future__ import annotations

import os
from pathlib import Path

from mtk import run_layout
from mtk.checkpoint_paths import checkpoint_dir
from mtk.run_outcome import why_no_figures
from mtk.runs import Run, run_records

from . import _job_dict, log_interval, write_report
from .records import NoMetrics, read_history
from .summary import Summary

HISTORY_DIR = "report-history"  # beside report/ in the newest run dir: a single run's report stays as it was


def readable_dir(run: Run) -> Path:
    """Where this machine reads the run's files: its run dir, or the local record dir of a pod path (EKS)."""
    local = Path(run.run_dir)
    return local if local.is_dir() or not run.record_dir else Path(run.record_dir)


def _checkpoints(run: Run) -> str | None:
    """The run's checkpoint dir as its job.json resolves it (None when the job file is not readable here)."""
    job = _job_dict(readable_dir(run))
    if job is None:
        return None
    configured = ((job.get("train") or {}).get("checkpoint") or {}).get("dir")
    return os.path.normpath(checkpoint_dir(configured if isinstance(configured, str) else None, run.run_dir))


def job_runs(run: Run) -> list[Run]:
    """The submitted launches of ``run``'s job up to ``run`` itself, oldest first: the runs beside it (a launch
    puts a runs dir's runs side by side) that share its checkpoint dir. A failed launch trained nothing and is
    left out; a run whose job file is unreadable is its own history."""
    mine = _checkpoints(run)
    if mine is None:
        return [run]
    here = (run.created, run.run_dir)
    same = [r for r in run_records(readable_dir(run).parent)
            if not r.launch_error and (r.created, r.run_dir) <= here and _checkpoints(r) == mine]
    return sorted(same or [run], key=lambda r: (r.created, r.run_dir))


def build_history(run: Run, out_dir: str | Path | None = None, *, gpu: str | None = None,
                  peak_tflops: float | None = None, plots: bool = True,
                  wandb: bool = True) -> tuple[Summary, list[Run], Path]:
    """Report ``run``'s job over all its launches; returns (summary, the launches read, where it was written).
    Raises NoMetrics when no launch has logged a train iteration."""
    runs = job_runs(run)
    newest = readable_dir(run)
    job = _job_dict(newest)
    name = (job or {}).get("name") or run.name
    paths, parts = [], []
    for r in runs:
        where = readable_dir(r)
        if (where / run_layout.METRICS_FILE).is_file():
            paths.append((where.name, where / run_layout.METRICS_FILE))
        parts.append((where.name, why_no_figures(where)))
    if not paths:
        raise NoMetrics(f"no launch of job {name} has logged a train iteration ({len(runs)} run dir(s) "
                                f"share its checkpoint dir; the newest, {newest.name}, {parts[-1][1]})")
    metrics = read_history(paths, log_interval(job))
    read = {r["run"]: r for r in metrics.runs}
    metrics.runs = [read.get(n) or {"run": n, "train_records": 0, "first_iteration": None, "last_iteration": None,
                                    "why": why} for n, why in parts]
    for entry in metrics.runs:
        if entry.get("why"):
            metrics.notes.append(f"{entry['run']} logged no train iteration: {entry['why']}")
    out = Path(out_dir) if out_dir is not None else newest / HISTORY_DIR
    summary = write_report(metrics, newest, job, out, f"Job history: {name} ({len(runs)} launches)",
                           f"{name}-history", gpu=gpu, peak_tflops=peak_tflops, plots=plots, wandb=wandb)
    return summary, runs, out
