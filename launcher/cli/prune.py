"""``mtk prune``: remove previews and old ended runs from the runs dir (never a live run or a checkpoint in use)."""

from __future__ import annotations

import click

from .common import runs_dir_option


@click.command("prune")
@runs_dir_option
@click.option("--older-than", default="7d", show_default=True,
              help="Ended runs (COMPLETED, FAILED, CANCELLED, STOPPED) started longer ago than this: 30m, 12h, 7d.")
@click.option("--previews/--no-previews", default=True, show_default=True,
              help="Also remove previews (run dirs written by render / launch --dry-run), whatever their age.")
@click.option("--yes", is_flag=True, help="Remove them; without it, only say what would go.")
def command(runs_dir, older_than, previews, yes):
    """Remove previews and ended runs older than --older-than from the runs dir.

    A running, pending or unreachable (UNKNOWN) run is never removed, nor a run dir holding a checkpoint dir that a
    kept run uses; the shared <runs_dir>/<name>/checkpoints of a job name is no run and is never touched."""
    import time
    from pathlib import Path

    from ..prune import parse_duration, plan, remove
    from ..runtable import table

    root = Path(runs_dir)
    decisions = plan(table(root, previews=True), root, parse_duration(older_than), previews, time.time())
    gone = [d for d in decisions if d.remove]
    for d in decisions:
        verb = ("removed" if yes else "would remove") if d.remove else "kept"
        if yes and d.remove:
            remove(d, root)
        click.echo(f"{verb} {d.row.name}: {d.why}")
    if not decisions:
        click.echo(f"no runs under {root}/")
    elif gone and not yes:
        click.echo(f"{len(gone)} to remove: run again with --yes to remove them")
