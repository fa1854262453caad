"""``mtk launch``: validate, render into a new run dir, submit (unless --dry-run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from .common import backend_option, handles_spec_errors, job_argument, load, set_option


@click.command("launch")
@job_argument
@set_option
@backend_option
@click.option("--dry-run", is_flag=True, help="Write the run files and print the commands; submit nothing.")
@click.option("--run-dir", default=None, help="Use this run dir instead of <runs_dir>/<name>-<time>.")
@click.option("--follow/--no-follow", default=None, help="Stream logs after submitting (default: local only).")
@handles_spec_errors
def command(job_file, overrides, backend, dry_run, run_dir, follow):
    """Launch JOB.yaml on a backend."""
    from ..backends import get_backend
    from ..outputs import check_launch_outputs
    from ..paths import resolve_paths
    from ..runs import new_run_dir
    from ..secrets import require

    job = load(job_file, overrides, backend, check_files=backend in ("local", "slurm"))
    job = resolve_paths(job, backend)
    target = run_dir or str(new_run_dir(job.cluster.runs_dir, job.name))
    check_launch_outputs(job, backend, target, dry_run)
    if backend == "eks":
        from ..image_pin import pin_image

        job, note = pin_image(job)
        if note:
            click.echo(note)  # stdout: stderr stays for the one error line, if any
    if not dry_run:
        require(job, backend)
    impl = get_backend(backend)
    artifacts = impl.render(job, target)
    if getattr(impl, "remote_run_dir", False):  # e.g. EKS: the run dir is a pod path on FSx
        artifacts = dataclasses.replace(artifacts, record_dir=str(Path("runs").absolute() / Path(target).name))
    artifacts.write()
    if dry_run:
        click.echo(artifacts.describe())
        click.echo("dry run: nothing submitted")
        return
    run = impl.submit(job, artifacts)
    run.record_dir = artifacts.record_dir or ""
    run.save()
    for step, ident in run.ids.items():
        click.echo(f"{step}: {ident}")
    click.echo(f"run: {run.record_dir or run.run_dir}")
    if follow if follow is not None else backend == "local":
        try:
            for line in impl.logs(run, follow=True):
                click.echo(line, nl=False)
        except KeyboardInterrupt:
            if backend != "local":
                click.echo(f"\nstopped following; the run goes on: mtk logs -f {run.run_dir}", err=True)
                raise SystemExit(130) from None
            click.echo("\ninterrupted: cancelling the run (it saves a checkpoint first)", err=True)
            impl.cancel(run)
            raise SystemExit(130) from None
        states = impl.status(run)
        failed = [s for s in states if s.state != "COMPLETED"]
        if failed:
            for s in failed:
                click.echo(f"{s.step}: {s.state} exit={s.exit_code} {s.reason}", err=True)
            raise SystemExit(1)
