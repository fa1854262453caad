"""``mtk save RUN`` / ``mtk stop RUN``: drop a trigger file any teammate can create, no scheduler access needed.

The engine checks ``<run_dir>/triggers/`` every log interval: ``save`` → checkpoint and carry on; ``exit`` →
checkpoint, stop with exit code STOPPED, and the cluster script cancels the rest of the chain.
"""

from __future__ import annotations

import time

import click

from mtk.exitcodes import UserFacingError
from mtk.steps import StepState

from .common import pick_run, run_argument, runs_dir_option


def _drop(run_ref: str, runs_dir: str, trigger: str) -> str:
    from mtk.files import atomic_write

    run = pick_run(run_ref, runs_dir)
    _refuse_if_ended(run, trigger)
    path = f"{run.run_dir}/{trigger}"
    from pathlib import Path

    atomic_write(Path(path), f"requested at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    return path


class RunEnded(UserFacingError, RuntimeError):
    """A trigger for a run that has ended would never be read: say so (exit 1) instead of claiming success."""


ENDED = {StepState.COMPLETED, StepState.FAILED, StepState.CANCELLED}


def _refuse_if_ended(run, trigger: str) -> None:
    from mtk.backends import get_backend

    states = get_backend(run.backend).status(run)
    if states and all(s.state in ENDED for s in states):
        summary = ", ".join(f"{s.step} {s.state}" for s in states)
        raise RunEnded(f"run {run.name} ({run.record_dir or run.run_dir}) has ended ({summary}): nothing will read "
                       f"the {trigger.rsplit('/', 1)[-1]} trigger. To train further, launch the spec again (it resumes "
                       "from the latest checkpoint)")


@click.command("save")
@run_argument
@runs_dir_option
def save_command(run_ref, runs_dir):
    """Ask RUN to write a checkpoint at its next log interval and continue."""
    from mtk.run_layout import SAVE_TRIGGER
    click.echo(f"save requested: {_drop(run_ref, runs_dir, SAVE_TRIGGER)}")


@click.command("stop")
@run_argument
@runs_dir_option
def stop_command(run_ref, runs_dir):
    """Ask RUN to checkpoint and stop cleanly (no requeue) at its next log interval."""
    from mtk.run_layout import EXIT_TRIGGER
    click.echo(f"stop requested: {_drop(run_ref, runs_dir, EXIT_TRIGGER)}")
