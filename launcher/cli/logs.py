"""``mtk logs``: print or follow a run's output, wherever the backend wrote it."""

from __future__ import annotations

import click

from .common import pick_run, run_argument, runs_dir_option


@click.command("logs")
@run_argument
@runs_dir_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the step ends.")
@click.option("--step", default=None, help="getdata, preprocess or train (default: the latest started).")
@click.option("--node", default=None, help="Only lines from this node/pod.")
def command(run_ref, runs_dir, follow, step, node):
    """Print the logs of RUN."""
    from mtk.backends import get_backend
    from mtk.exitcodes import UserFacingError

    run = pick_run(run_ref, runs_dir)
    if run.launch_error and not run.ids:
        raise UserFacingError(f"{run.run_dir}: its launch failed before anything was submitted ({run.launch_error}); "
                              "there are no logs: fix that and launch again")
    for line in get_backend(run.backend).logs(run, follow=follow, step=step, node=node):
        click.echo(line, nl=False)
