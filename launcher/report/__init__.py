"""``mtk report``: plots and a summary from a run's ``metrics.jsonl``.

``build_report(run_dir)`` reads the metrics (tolerantly: unknown keys ignored, a truncated last line skipped
with a note), writes PNG plots plus ``summary.json``/``summary.md`` into ``<run_dir>/report/`` and returns the
summary. matplotlib is the optional ``report`` extra; without it the summary is still written.
"""

from __future__ import annotations

import json
from pathlib import Path

from mtk import run_layout
from mtk.files import atomic_write
from mtk.run_outcome import ended

from .gpus import detect_gpu
from .records import Metrics, NoMetrics, read_metrics
from .summary import Summary, summarize, to_markdown, to_text

REPORT_DIR = "report"

__all__ = ["REPORT_DIR", "Metrics", "Summary", "build_report", "read_metrics", "summarize", "to_text"]


def _job_dict(run_dir: Path) -> dict | None:
    """The run's job.json as plain data (no validation: a report must work for older specs too)."""
    try:
        data = json.loads((run_dir / run_layout.JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *, gpu: str | None = None,
                 peak_tflops: float | None = None, plots: bool = True, wandb: bool = True) -> Summary:
    """Write plots and summary files; raises NoMetrics when the run has no metrics file yet."""
    run_dir = Path(run_dir)
    path = run_dir / run_layout.METRICS_FILE
    if not path.is_file():
        raise NoMetrics(f"{path} does not exist: the training step has not logged an iteration yet "
                                "(see `mtk status` / `mtk logs`)")
    job = _job_dict(run_dir)
    metrics = read_metrics(path, log_interval(job))
    name = (job or {}).get("name") or run_dir.name
    out = Path(out_dir) if out_dir is not None else run_dir / REPORT_DIR
    return write_report(metrics, run_dir, job, out, f"Run report: {name} ({run_dir.name})", run_dir.name,
                        gpu=gpu, peak_tflops=peak_tflops, plots=plots, wandb=wandb)


def _cancelled_by_scheduler(run_dir: Path) -> bool:
    """Whether the run's backend reads it CANCELLED where its files say "saved for a requeue": ``scancel`` and a
    preemption both reach the ranks as SIGTERM, and only the scheduler knows which it was (as ``mtk ls`` asks)."""
    from mtk.run_outcome import saved_for_requeue
    from mtk.runs import RECORD, Run
    from mtk.steps import StepState

    if not saved_for_requeue(run_dir) or not (run_dir / RECORD).is_file():
        return False
    from ..runtable import run_state

    try:
        return run_state(Run.load(run_dir / RECORD)) == StepState.CANCELLED
    except (OSError, ValueError):
        return False


def log_interval(job: dict | None) -> int | None:
    """The spec's ``train.log_interval`` when it is a usable one (else the reader infers it from the records)."""
    interval = ((job or {}).get("train") or {}).get("log_interval")
    return interval if isinstance(interval, int) and interval > 0 else None


def write_report(metrics: Metrics, run_dir: Path, job: dict | None, out: Path, title: str, wandb_name: str, *,
                 gpu: str | None = None, peak_tflops: float | None = None, plots: bool = True,
                 wandb: bool = True) -> Summary:
    """Summarize ``metrics`` (GPU and ending read from ``run_dir``, the newest run they cover) and write the
    plots, summary.json and summary.md into ``out``."""
    if not metrics.train:
        metrics.notes.append("no train records: nothing to plot")
    summary = summarize(metrics, detect_gpu(run_dir, job, gpu, peak_tflops))
    summary.ended = ended(run_dir, cancelled=_cancelled_by_scheduler(run_dir))
    out.mkdir(parents=True, exist_ok=True)
    if plots and metrics.train:
        try:
            written, notes = _render(metrics, out)
            summary.plots, summary.notes = written, summary.notes + notes
        except ImportError:
            summary.notes.append("plots skipped: matplotlib is not installed (pip install 'mtk[report]')")
    if wandb:
        from .wandb_log import log_to_wandb

        note = log_to_wandb(metrics, wandb_name, summary.to_dict())
        if note:
            summary.notes.append(note)
    atomic_write(out / "summary.json", json.dumps(summary.to_dict(), indent=2, sort_keys=True) + "\n")
    atomic_write(out / "summary.md", to_markdown(summary, title))
    return summary


def _render(metrics: Metrics, out: Path) -> tuple[list[str], list[str]]:
    from .plots import render_plots

    return render_plots(metrics, out)
