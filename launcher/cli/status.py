"""``mtk status``: per-step state of a run."""

from __future__ import annotations

import click

from .common import pick_run, run_argument, runs_dir_option


@click.command("status")
@run_argument
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(run_ref, runs_dir, as_json):
    """Show each step of RUN (a run dir or run name)."""
    import json
    from dataclasses import asdict

    from mtk.backends import get_backend

    run = pick_run(run_ref, runs_dir)
    if run.launch_error:  # a failed launch: what was recorded, and what the backend says of anything submitted
        from ..failed_launch import launch_steps

        states = launch_steps(run)
    else:
        states = get_backend(run.backend).status(run)
    if as_json:
        click.echo(json.dumps([asdict(s) for s in states], indent=2))
        return
    click.echo(f"run {run.name} ({run.backend}) {run.run_dir}")
    for s in states:
        code = "" if s.exit_code is None else f" exit={s.exit_code}"
        click.echo(f"  {s.step:<12} {s.state:<10} {s.id}{code} {s.reason}".rstrip())
        for line in s.log_tail:
            click.echo(f"      | {line}")
    from mtk.exclusions import read_excluded

    excluded = read_excluded(run.run_dir)
    if excluded:
        click.echo("  excluded nodes (every restart avoids them):")
        for e in excluded:
            click.echo(f"    {e.host:<16} since {e.since}: {e.reason}")
