"""``mtk cancel``: stop every step of a run (safe to repeat)."""

from __future__ import annotations

import click

from .common import pick_run, run_argument, runs_dir_option


@click.command("cancel")
@run_argument
@runs_dir_option
def command(run_ref, runs_dir):
    """Cancel every step of RUN."""
    from mtk.backends import get_backend

    run = pick_run(run_ref, runs_dir)
    if run.launch_error and not run.ids:
        click.echo(f"nothing to cancel: the launch of {run.name} failed before anything was submitted "
                   f"({run.launch_error})")
        return
    get_backend(run.backend).cancel(run)
    click.echo(f"cancelled {run.name} ({run.record_dir or run.run_dir})")
