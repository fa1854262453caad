"""``mtk report A B …``: several runs on shared axes, so a config change can be judged at a glance.

One PNG (``compare.png``) with four panels — train loss, validation loss, throughput, MFU — each run one
colour in every panel, named in one legend; x is the iteration or the tokens consumed (``consumed_samples`` ×
the run's ``model.seq_length``), the fair axis when runs differ in batch size. Beside it a side-by-side table
(``compare.md``/``compare.json``) of each run's summary numbers. Superseded iterations (redone after a restart)
are left out: each line is the run's final lineage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mtk import run_layout
from mtk.files import atomic_write
from mtk.run_outcome import ended

from .gpus import detect_gpu
from .records import Metrics, NoMetrics, read_metrics
from .summary import Summary, rows, summarize

X_AXES = ("iteration", "tokens")
PANELS = (("lm_loss", "train loss"), ("val_loss", "validation loss"), ("tokens_per_s", "throughput (tokens/s)"),
          ("mfu", "MFU (%)"))


@dataclass
class RunData:
    label: str
    run_dir: Path
    metrics: Metrics
    summary: Summary
    seq_length: int | None


def load_run(run_dir: Path, label: str, gpu: str | None = None, peak_tflops: float | None = None) -> RunData:
    path = run_dir / run_layout.METRICS_FILE
    if not path.is_file():
        raise NoMetrics(f"{path} does not exist: run {label} has not logged an iteration yet")
    try:
        job = json.loads((run_dir / run_layout.JOB_FILE).read_text())
    except (OSError, ValueError):
        job = None
    job = job if isinstance(job, dict) else None
    interval = ((job or {}).get("train") or {}).get("log_interval")
    metrics = read_metrics(path, interval if isinstance(interval, int) and interval > 0 else None)
    seq = ((job or {}).get("model") or {}).get("seq_length")
    summary = summarize(metrics, detect_gpu(run_dir, job, gpu, peak_tflops))
    summary.ended = ended(run_dir)
    return RunData(label, run_dir, metrics, summary, seq if isinstance(seq, int) else None)


def series(run: RunData, key: str, x: str) -> tuple[list[float], list[float]]:
    """(xs, ys) of one panel for one run; MFU in percent from TFLOP/s per GPU and the run's GPU peak."""
    live, _ = run.metrics.timeline()
    if key == "val_loss":
        records, field = run.metrics.eval_timeline()[0], "lm_loss"
    elif key == "mfu":
        if not run.summary.peak_tflops:
            return [], []
        records, field = live, "tflops_per_gpu"
    else:
        records, field = live, key
    by_iteration = {r["iteration"]: r.get("consumed_samples") for r in run.metrics.train}
    xs, ys = [], []
    for it, value in run.metrics.values(field, records):
        if x == "tokens":
            samples = by_iteration.get(it)
            if not isinstance(samples, int) or run.seq_length is None:
                continue
            xs.append(float(samples * run.seq_length))
        else:
            xs.append(float(it))
        ys.append(value * 100 / run.summary.peak_tflops if key == "mfu" and run.summary.peak_tflops else value)
    return xs, ys


def plot(runs: list[RunData], out: Path, x: str = "iteration") -> tuple[Path, list[str]]:
    """Write ``compare.png``; returns its path and notes for panels no run could fill."""
    from .plots import _pyplot, _save

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    notes = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    try:
        for ax, (key, title) in zip(axes.flat, PANELS, strict=True):
            drawn = 0
            for i, run in enumerate(runs):
                xs, ys = series(run, key, x)
                if xs:
                    ax.plot(xs, ys, marker="o" if key == "val_loss" or len(xs) < 40 else None, ms=3, lw=1.3,
                            color=colors[i % len(colors)], label=run.label)
                    drawn += 1
            if not drawn:
                why = "no run has a known GPU peak (--gpu/--peak-tflops)" if key == "mfu" else "no run logged it"
                ax.text(0.5, 0.5, f"no data: {why}", ha="center", va="center", transform=ax.transAxes, color="0.4")
                notes.append(f"{title}: {why}")
            ax.set_title(title)
            ax.grid(alpha=0.3)
        for ax in axes[1]:
            ax.set_xlabel("tokens consumed" if x == "tokens" else "iteration")
        handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
        fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=min(4, len(handles)) or 1,
                   fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        path = out / "compare.png"
        _save(fig, path)
    finally:
        plt.close(fig)
    return path, notes


def table(runs: list[RunData]) -> list[list[str]]:
    """Header row of run labels, then one row per summary figure, runs side by side."""
    columns = [dict(rows(r.summary)) for r in runs]
    labels = [k for k, _ in rows(runs[0].summary)]
    return [["metric", *[r.label for r in runs]]] + [[k, *[c[k] for c in columns]] for k in labels]


def to_text(grid: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in grid) for i in range(len(grid[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in grid)


def to_markdown(grid: list[list[str]], png: str | None) -> str:
    lines = ["# Run comparison", "", "| " + " | ".join(grid[0]) + " |", "|" + "---|" * len(grid[0])]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in grid[1:]]
    if png:
        lines += ["", f"![comparison]({png})"]
    return "\n".join(lines) + "\n"


def compare(runs: list[RunData], out: Path, x: str = "iteration", plots: bool = True) -> dict:
    """Write compare.png (unless ``plots`` is off), compare.md and compare.json into ``out``."""
    if x not in X_AXES:
        raise ValueError(f"x axis must be one of {', '.join(X_AXES)}, not {x!r}")
    out.mkdir(parents=True, exist_ok=True)
    grid = table(runs)
    png: Path | None = None
    notes: list[str] = []
    if plots:
        try:
            png, notes = plot(runs, out, x)
        except ImportError:
            notes.append("plot skipped: matplotlib is not installed (pip install 'mtk[report]')")
    if x == "tokens" and any(r.seq_length is None for r in runs):
        notes.append("runs without model.seq_length in job.json are missing from the tokens axis")
    result = {"runs": {r.label: {"run_dir": str(r.run_dir), **r.summary.to_dict()} for r in runs},
              "x": x, "plot": png.name if png else None, "notes": notes}
    atomic_write(out / "compare.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
    atomic_write(out / "compare.md", to_markdown(grid, png.name if png else None))
    result["table"] = to_text(grid)
    return result
