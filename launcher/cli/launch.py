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
@click.option("--dry-run", is_flag=True, help="Write the run files into a local preview dir and print the commands; "
                                            "submit nothing and touch none of the cluster's paths.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="With --dry-run: where to write the preview (default: ./runs/<run> for slurm/eks).")
@click.option("--run-dir", default=None, help="Use this run dir instead of <runs_dir>/<name>-<time>.")
@click.option("--follow/--no-follow", default=None, help="Stream logs after submitting (default: local only).")
@click.option("--preflight/--no-preflight", default=None,
              help="Health gate on every node before training (Slurm; default: resilience.preflight.enabled).")
@click.option("--megatron-check/--no-megatron-check", default=None,
              help="Have megatron-core build the config and model on the meta device before submitting (default: "
                   "on for slurm and eks, where a refusal would otherwise come after queueing; needs mtk[train]).")
@click.option("--wait/--no-wait", default=None,
              help="EKS: follow each step (etcd, data Jobs, training) with a line per change until training runs "
                   "(default), or submit every step at once and return; the steps still wait for each other in the "
                   "cluster, but training pods then hold their nodes while the data is prepared.")
@click.option("--timeout", "timeout", default=None, metavar="DURATION",
              help="EKS, with --wait: stop waiting after e.g. 30m or 2h (default: no limit); the rest is then "
                   "submitted, the run goes on, and the exit code is 124.")
@handles_spec_errors
def command(job_file, overrides, backend, dry_run, out, run_dir, follow, preflight, megatron_check, wait, timeout):
    """Launch JOB.yaml on a backend."""
    from ..backends import get_backend
    from ..outputs import check_launch_outputs
    from ..paths import resolve_paths
    from ..runs import new_run_dir
    from ..secrets import require

    wait_seconds = _wait_options(backend, wait, timeout)
    if preflight is not None:
        overrides = [*overrides, f"resilience.preflight.enabled={str(preflight).lower()}"]
    job = load(job_file, overrides, backend, check_files=backend in ("local", "slurm"))
    if megatron_check if megatron_check is not None else backend != "local":
        from ..megatron_check import enforce

        note = enforce(job, job_file).note
        if note:
            click.echo(f"note: {note}", err=True)
    job = resolve_paths(job, backend)
    target = run_dir or str(new_run_dir(job.cluster.runs_dir, job.name))
    if backend in ("slurm", "eks"):  # a relaunch avoids the nodes earlier attempts of this run excluded
        from ..exclusions import with_recorded_exclusions

        job, excluded_note = with_recorded_exclusions(job, target)
        if excluded_note:
            click.echo(f"note: {excluded_note}", err=True)
    check_launch_outputs(job, backend, target, dry_run)
    if backend == "eks":
        from ..image_pin import pin_image

        job, note = pin_image(job)
        if note:
            click.echo(note)  # stdout: stderr stays for the one error line, if any
    impl = get_backend(backend)
    if not dry_run:
        from ..launch_checks import check_before_submit

        require(job, backend)
        check_before_submit(impl, job, target)
    artifacts = impl.render(job, target)
    if getattr(impl, "remote_run_dir", False):  # e.g. EKS: the run dir is a pod path on FSx
        artifacts = dataclasses.replace(artifacts, record_dir=str(Path("runs").absolute() / Path(target).name))
    if out is not None and not dry_run:
        raise click.UsageError("--out is for --dry-run previews; a real launch writes into its run dir")
    if dry_run:
        # A preview never writes into the cluster's paths (a laptop as root would create /fsx/runs/<run>).
        preview = out or (artifacts.record_dir if backend != "local" else None) or (
            target if backend == "local" else str(Path("runs").absolute() / Path(target).name))
        artifacts = dataclasses.replace(artifacts, record_dir=str(Path(preview).absolute()))
        artifacts.write()
        click.echo(artifacts.describe())
        click.echo(f"dry run: nothing submitted; preview written to {artifacts.record_dir}"
                   + ("" if artifacts.record_dir == artifacts.run_dir else f" (the run dir {artifacts.run_dir} "
                                                                           "was not created)"))
        return
    artifacts.write()
    stopped = None
    if backend == "eks":
        from ...k8s.backend import EksBackend
        from ...k8s.launch_wait import StoppedWaiting

        assert isinstance(impl, EksBackend)  # the EKS backend alone can follow its steps
        try:
            run = impl.submit(job, artifacts, wait=wait is not False, timeout=wait_seconds)
        except StoppedWaiting as exc:
            if exc.run is None:  # submit attaches the run; without it there is nothing to record
                raise
            run, stopped = exc.run, exc
    else:
        run = impl.submit(job, artifacts)
    run.record_dir = artifacts.record_dir or ""
    run.save()
    for step, ident in run.ids.items():
        click.echo(f"{step}: {ident}")
    click.echo(f"run: {run.record_dir or run.run_dir}")
    if backend == "eks" and (stopped is not None or wait is False):
        from ...k8s.launch_wait import follow_hint

        what = f"{stopped}; every step is submitted" if stopped else "not waiting (--no-wait): every step is submitted"
        click.echo(f"{what} and waits in the cluster for the one before it; "
                   f"{follow_hint(Path(run.record_dir or run.run_dir).name, run.extra.get('namespace', 'default'))}",
                   err=True)
        if stopped is not None:
            raise SystemExit(stopped.exit_code)
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


def _wait_options(backend: str, wait: bool | None, timeout: str | None) -> float | None:
    """--wait/--no-wait/--timeout are honoured on EKS only, so they are refused elsewhere rather than ignored; the
    timeout is parsed before anything is rendered or submitted."""
    if backend != "eks" and (wait is not None or timeout is not None):
        raise click.UsageError(f"--wait/--no-wait/--timeout follow the steps of an EKS launch; --backend {backend} "
                               "has no such steps to wait for (--follow/--no-follow choose whether its logs stream)")
    if timeout is None:
        return None
    if wait is False:
        raise click.UsageError("--timeout bounds --wait; with --no-wait the launch returns at once")
    from ...k8s.launch_wait import parse_duration

    try:
        return parse_duration(timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timeout") from None
