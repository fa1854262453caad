"""``mtk report``: PNG plots and a summary (loss, throughput, MFU, restarts) from a run's metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .common import SuggestingChoice, pick_run, runs_dir_option

if TYPE_CHECKING:
    from mtk.runs import Run


def _resolve(run_ref: str | None, runs_dir: str) -> Path:
    """A run dir (with or without run.json), a run name under --runs-dir, or (none given) the newest run."""
    from pathlib import Path

    from mtk.run_layout import METRICS_FILE
    from mtk.runs import RunNotFound

    if run_ref is None:
        return _newest_with_figures(runs_dir)
    try:
        run = pick_run(run_ref, runs_dir)
    except RunNotFound:
        if (Path(run_ref) / METRICS_FILE).is_file():  # no run record, but metrics: e.g. copied off a cluster
            return Path(run_ref)
        raise
    return _readable_dir(run)


def _readable_dir(run: Run) -> Path:
    from ..report.history import readable_dir

    return readable_dir(run)


def _newest_with_figures(runs_dir: str) -> Path:
    """No RUN: the newest submitted run that logged a train iteration; the newer ones passed over (a relaunch
    with nothing to do, a run not started yet) are named on stderr with why, so the report never silently
    shows another run — and when none has figures, the error says why for the newest."""
    from mtk.run_outcome import has_train_records, why_no_figures
    from mtk.runs import newest_run, run_records

    from ..report.records import NoMetrics

    newest_run(runs_dir)  # no submitted run at all: its RunNotFound says what was found
    passed: list[tuple[str, str]] = []
    for run in (r for r in run_records(runs_dir) if not r.launch_error):
        where = _readable_dir(run)
        if has_train_records(where):
            over = "".join(f"; passing over {name}: {why}" for name, why in passed)
            click.echo(f"run: {run.name} ({where}), the newest under {runs_dir}/ with train records{over}", err=True)
            return where
        passed.append((where.name, why_no_figures(where)))
    name, why = passed[0]
    raise NoMetrics(f"no run under {runs_dir}/ has logged a train iteration to report: the newest, {name}, {why}"
                    + (f" ({len(passed) - 1} older ones neither)" if len(passed) > 1 else ""))


@click.command("report")
@click.argument("run_refs", metavar="[RUN]...", nargs=-1)
@runs_dir_option
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where to write plots and summary files (default: RUN_DIR/report; for several runs "
                   "<runs-dir>/compare-<UTC time>).")
@click.option("--x", "x_axis", type=SuggestingChoice(["iteration", "tokens"]), default="iteration", show_default=True,
              help="x axis when comparing runs: iteration or tokens consumed.")
@click.option("--gpu", default=None, metavar="NAME",
              help="GPU model for MFU, e.g. H100, A100, B200 (default: from the run's env dump).")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Per-GPU peak TFLOP/s for MFU, for a GPU not in the built-in table.")
@click.option("--no-plots", is_flag=True, help="Only the summary (no matplotlib needed).")
@click.option("--no-wandb", is_flag=True, help="Do not log to W&B even when WANDB_API_KEY/WANDB_MODE is set.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the table.")
@click.option("--history", is_flag=True,
              help="Every launch of RUN's job (the runs sharing its checkpoint dir, up to RUN) as one timeline, "
                   "relaunches marked; written to RUN_DIR/report-history.")
def command(run_refs, runs_dir, out, gpu, peak_tflops, x_axis, no_plots, no_wandb, as_json, history):
    """Plot RUN's metrics (loss, LR, grad norm, throughput, step time) and summarize it; with several RUNs,
    overlay their loss, validation loss, throughput and MFU on shared axes and tabulate them side by side.
    With --history, RUN's job over all its launches (a job resumed three times: one report of iterations 1..N)."""
    import json
    from pathlib import Path

    from mtk.exitcodes import BadInput

    from ..report import REPORT_DIR, build_report, to_text

    if history:
        if len(run_refs) > 1:
            raise BadInput(f"--history reports one job; {len(run_refs)} RUNs were given ({', '.join(run_refs)}): "
                           "pass one, or drop --history to compare runs")
        _history(run_refs[0] if run_refs else None, runs_dir, out, gpu, peak_tflops, no_plots, no_wandb, as_json)
        return
    if len(run_refs) > 1:
        _compare(run_refs, runs_dir, out, gpu, peak_tflops, x_axis, no_plots, as_json)
        return
    run_dir = _resolve(run_refs[0] if run_refs else None, runs_dir)
    summary = build_report(run_dir, out, gpu=gpu, peak_tflops=peak_tflops, plots=not no_plots, wandb=not no_wandb)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
        return
    dest = Path(out) if out else run_dir / REPORT_DIR
    _hint_history(run_refs, runs_dir)
    click.echo(f"report for {run_dir}")
    click.echo(to_text(summary))
    click.echo(f"wrote {dest}/summary.md, summary.json" + "".join(f", {p}" for p in summary.plots))


def _hint_history(run_refs, runs_dir) -> None:
    """RUN that is a job name with several launches reports the newest only; say how to see them all."""
    from mtk.runs import RunNotFound, run_records

    if len(run_refs) != 1:
        return
    try:
        launches = [r for r in run_records(runs_dir) if r.name == run_refs[0] and not r.launch_error]
    except (RunNotFound, OSError):
        return
    if len(launches) > 1:
        click.echo(f"note: job {run_refs[0]} has {len(launches)} launches; `mtk report --history {run_refs[0]}` "
                   "reports them as one timeline", err=True)


def _history(run_ref, runs_dir, out, gpu, peak_tflops, no_plots, no_wandb, as_json):
    import json

    from ..report import to_text
    from ..report.history import build_history

    run = pick_run(run_ref, runs_dir)
    summary, runs, dest = build_history(run, out, gpu=gpu, peak_tflops=peak_tflops, plots=not no_plots,
                                        wandb=not no_wandb)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
        return
    click.echo(f"history of job {run.name}: {len(runs)} launch(es), oldest first")
    click.echo(to_text(summary))
    click.echo(f"wrote {dest}/summary.md, summary.json" + "".join(f", {p}" for p in summary.plots))


def _compare(run_refs, runs_dir, out, gpu, peak_tflops, x_axis, no_plots, as_json):
    import json
    import time
    from pathlib import Path

    from mtk.exitcodes import BadInput

    from ..report.compare import compare, load_run

    dirs = [_resolve(ref, runs_dir) for ref in run_refs]
    if len(set(dirs)) != len(dirs):
        raise BadInput(f"the same run is named twice: {', '.join(run_refs)}")
    runs = [load_run(d, d.name, gpu, peak_tflops) for d in dirs]
    dest = Path(out) if out else Path(runs_dir) / time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime())
    result = compare(runs, dest, x_axis, plots=not no_plots)
    if as_json:
        click.echo(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=2, sort_keys=True))
        return
    click.echo(result["table"])
    for note in result["notes"]:
        click.echo(f"note: {note}")
    files = ["compare.md", "compare.json"] + ([result["plot"]] if result["plot"] else [])
    click.echo(f"wrote {dest}/" + ", ".join(files))
