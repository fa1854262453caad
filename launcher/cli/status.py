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
    from ..runtable import fold_steps, progress

    state = fold_steps(states)
    p = progress(run, state)
    if as_json:
        click.echo(json.dumps([{**asdict(s), **_names(run), **(_train_progress(p) if s.step == "train" else {})}
                               for s in states], indent=2))
        return
    click.echo(f"run {run.name} ({run.backend}) {run.run_dir}")
    line = _progress_line(p, state)
    if line:
        click.echo(f"  {line}")
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


def _names(run) -> dict:
    """What names the run in each step's JSON object: the list stays a list of steps (what scripts already read),
    and each says whose step it is."""
    from pathlib import Path

    return {"run": Path(run.record_dir or run.run_dir).name, "job": run.name, "backend": run.backend,
            "run_dir": run.run_dir}


def _train_progress(p: dict) -> dict:
    """The train step's progress (the run's iteration is its train step's), as ``mtk ls --json`` names it."""
    return {"iteration": p.get("iteration"), "total": p.get("total"), "eta_s": p.get("eta_s"),
            "no_op": p.get("no_op", False)}


def _progress_line(p: dict, state: str) -> str:
    """``iteration 12/30, ETA 1m at the recent pace``; empty before any iteration is logged."""
    from ..runtable import _age

    if p.get("iteration") is None:
        return ""
    if p.get("no_op"):
        return f"iteration {p['iteration']} ({p['note']})"
    line = f"iteration {p['iteration']}/{p.get('total') or '?'}"
    if p.get("eta_s") is not None:
        line += f", ETA {_age(p['eta_s'])} at the recent pace"
    return line
