"""PNG plots of a run (matplotlib, Agg backend, imported only here so the CLI stays light).

Every plot uses the final lineage of the run (what a resumed run kept) as a line, draws iterations that a
restart threw away as faint grey points, and marks each resume point with a dashed vertical line (in a job's
history, each relaunch with a dotted one).
A plot whose data is missing from every record is skipped with a note instead of drawn empty.
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Callable
from pathlib import Path

from mtk.files import atomic_write

from .records import Metrics, Record


def _pyplot():
    from mtk.extras import requires

    with requires("report", "mtk report"):
        import matplotlib

    matplotlib.use("Agg", force=True)  # never needs a display, safe in threads-free batch jobs
    import matplotlib.pyplot as plt

    return plt


def _series(metrics: Metrics, key: str, records: list[Record]) -> tuple[list[int], list[float]]:
    pairs = metrics.values(key, records)
    return [i for i, _ in pairs], [v for _, v in pairs]


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, buf.getvalue())


def _line_plot(metrics: Metrics, key: str, title: str, ylabel: str, path: Path, *,
               log_y: bool = False, extra: Callable | None = None) -> bool:
    live, superseded = metrics.timeline()
    xs, ys = _series(metrics, key, live)
    if not xs:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        ax.plot(xs, ys, marker="." if len(xs) < 60 else None, lw=1.4, color="tab:blue", label="train")
        gx, gy = _series(metrics, key, superseded)
        if gx:
            ax.scatter(gx, gy, s=10, color="0.65", zorder=1, label="redone after restart")
        labelled = set()
        for r in metrics.restarts:  # a relaunch (a job's history: a new run dir) apart from a resume within a run
            label = "relaunch (new run dir)" if r.run else "resume point"
            ax.axvline(r.resume_iteration, ls=":" if r.run else "--", lw=0.9, color="tab:purple" if r.run else
                       "tab:red", label=None if label in labelled else label)
            labelled.add(label)
        if extra is not None:
            extra(ax)
        if log_y and min(ys + gy) > 0 and max(ys + gy) / min(ys + gy) > 20:  # log only when spikes dwarf the rest
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(ax.get_legend_handles_labels()[0]) > 1:  # a lone "train" entry says nothing
            ax.legend(fontsize=8)
        _save(fig, path)
    finally:
        plt.close(fig)
    return True


def _eval_points(metrics: Metrics) -> Callable:
    def draw(ax) -> None:
        kept, dropped = metrics.eval_timeline()
        xs, ys = _series(metrics, "lm_loss", kept)
        if xs:
            ax.plot(xs, ys, "o", ms=6, color="tab:orange", label="eval")
        xs, ys = _series(metrics, "lm_loss", dropped)
        if xs:
            ax.plot(xs, ys, "o", ms=6, mfc="none", color="0.55", label="eval, redone after restart")
    return draw


def _median_line(metrics: Metrics, key: str, unit: str) -> Callable:
    def draw(ax) -> None:
        vals = [v for _, v in metrics.values(key)]
        if vals:
            med = statistics.median(vals)
            ax.axhline(med, ls=":", color="tab:green", label=f"median {med:,.0f} {unit}")
    return draw


def _step_time_hist(metrics: Metrics, path: Path) -> bool:
    vals = [v for _, v in metrics.values("step_time_ms")]
    if not vals:
        return False
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        ax.hist(vals, bins=min(40, max(5, len(vals) // 2)), color="tab:purple", alpha=0.85)
        med = statistics.median(vals)
        ax.axvline(med, ls="--", color="k", label=f"median {med:,.1f} ms")
        per = "" if metrics.log_interval == 1 else f" (each a mean over {metrics.log_interval} iterations)"
        ax.set_title(f"Step time, {len(vals)} logged records{per}")
        ax.set_xlabel("step time (ms)")
        ax.set_ylabel("records")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        _save(fig, path)
    finally:
        plt.close(fig)
    return True


def render_plots(metrics: Metrics, out_dir: Path) -> tuple[list[str], list[str]]:
    """Write the PNGs into ``out_dir``; returns (file names written, notes for the plots skipped)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plans: list[tuple[str, str, Callable[[Path], bool]]] = [
        ("loss.png", "lm_loss", lambda p: _line_plot(
            metrics, "lm_loss", "LM loss (train line, eval points)", "lm loss (cross-entropy, nats)", p,
            extra=_eval_points(metrics))),
        ("lr.png", "lr", lambda p: _line_plot(metrics, "lr", "Learning rate", "learning rate", p)),
        ("grad_norm.png", "grad_norm", lambda p: _line_plot(
            metrics, "grad_norm", "Gradient norm (before clipping)", "grad norm (L2)", p, log_y=True)),
        ("throughput.png", "tokens_per_s", lambda p: _line_plot(
            metrics, "tokens_per_s", "Throughput per step", "tokens/s (whole job)", p,
            extra=_median_line(metrics, "tokens_per_s", "tokens/s"))),
        ("step_time_hist.png", "step_time_ms", lambda p: _step_time_hist(metrics, p)),
    ]
    written, notes = [], []
    for name, key, draw in plans:
        if draw(out_dir / name):
            written.append(name)
        else:
            notes.append(f"skipped {name}: no train record has a numeric '{key}'")
    return written, notes
