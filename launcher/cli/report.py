"""``mtk report``: PNG plots and a summary (loss, throughput, MFU, restarts) from a run's metrics."""

from __future__ import annotations

import click

from .common import fail, runs_dir_option


def _resolve(run_ref: str, runs_dir: str):
    """A run dir (with or without run.json) or a run name under --runs-dir."""
    from pathlib import Path

    from ..exitcodes import METRICS_FILE
    from ..runs import find_run

    try:
        return Path(find_run(run_ref, runs_dir).run_dir)
    except FileNotFoundError as exc:
        if (Path(run_ref) / METRICS_FILE).is_file():  # e.g. a run dir copied off a cluster without run.json
            return Path(run_ref)
        fail(str(exc))


@click.command("report")
@click.argument("run_ref", metavar="RUN")
@runs_dir_option
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where to write plots and summary files (default: RUN_DIR/report).")
@click.option("--gpu", default=None, metavar="NAME",
              help="GPU model for MFU, e.g. H100, A100, B200 (default: from the run's env dump).")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Per-GPU peak TFLOP/s for MFU, for a GPU not in the built-in table.")
@click.option("--no-plots", is_flag=True, help="Only the summary (no matplotlib needed).")
@click.option("--no-wandb", is_flag=True, help="Do not log to W&B even when WANDB_API_KEY/WANDB_MODE is set.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the table.")
def command(run_ref, runs_dir, out, gpu, peak_tflops, no_plots, no_wandb, as_json):
    """Plot RUN's metrics (loss, LR, grad norm, throughput, step time) and summarize it."""
    import json
    from pathlib import Path

    from ..report import REPORT_DIR, build_report, to_text

    run_dir = _resolve(run_ref, runs_dir)
    try:
        summary = build_report(run_dir, out, gpu=gpu, peak_tflops=peak_tflops, plots=not no_plots,
                               wandb=not no_wandb)
    except FileNotFoundError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
        return
    dest = Path(out) if out else run_dir / REPORT_DIR
    click.echo(f"report for {run_dir}")
    click.echo(to_text(summary))
    click.echo(f"wrote {dest}/summary.md, summary.json" + "".join(f", {p}" for p in summary.plots))
