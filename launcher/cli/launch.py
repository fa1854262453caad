"""``mtk launch``: validate, render into a new run dir, submit (unless --dry-run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from .common import backend_option, job_argument, load, pick_backend, set_option


@click.command("launch")
@job_argument
@set_option
@backend_option
@click.option("--dry-run", is_flag=True, help="Write the run files into a local preview dir and print the commands; "
                                            "submit nothing and touch none of the cluster's paths.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="With --dry-run: where to write the preview (default: ./runs/<run>, or the run dir itself "
                   "for a backend that runs on this machine).")
@click.option("--run-dir", default=None, help="Use this run dir instead of <runs_dir>/<name>-<time>.")
@click.option("--follow/--no-follow", default=None, help="Stream logs after submitting (default: local only).")
@click.option("--preflight/--no-preflight", default=None,
              help="Health gate on every node before training (Slurm; default: resilience.preflight.enabled).")
@click.option("--megatron-check/--no-megatron-check", default=None,
              help="Have megatron-core build the config and model on the meta device before submitting (default: "
                   "on for slurm and eks, where a refusal would otherwise come after queueing; needs mtk[train]).")
@click.option("--megatron-recheck", is_flag=True,
              help="Run the megatron-core check even when the cache holds a verdict for this model/parallel/train "
                   "and versions (and refresh it); implies --megatron-check.")
@click.option("--wait/--no-wait", default=None,
              help="EKS: follow each step (etcd, data Jobs, training) with a line per change until training runs "
                   "(default), or submit every step at once and return; the steps still wait for each other in the "
                   "cluster, but training pods then hold their nodes while the data is prepared.")
@click.option("--timeout", "timeout", default=None, metavar="DURATION",
              help="EKS, with --wait: stop waiting after e.g. 30m or 2h (default: no limit); the rest is then "
                   "submitted, the run goes on, and the exit code is 124.")
def command(job_file, overrides, backend, dry_run, out, run_dir, follow, preflight, megatron_check, megatron_recheck,
            wait, timeout):
    """Launch JOB.yaml on a backend."""
    from mtk.backends import SubmitStopped, get_backend
    from mtk.exitcodes import INTERRUPTED
    from mtk.runs import reserve_run_dir
    from mtk.secrets import require

    from ..megatron_args_file import with_args_file
    from ..outputs import check_launch_outputs
    from ..paths import launch_run_dir, resolve_paths

    if megatron_recheck and megatron_check is False:
        raise click.UsageError("--megatron-recheck runs the check that --no-megatron-check turns off: pass one")
    if out is not None and not dry_run:
        raise click.UsageError("--out is for --dry-run previews; a real launch writes into its run dir")
    backend, inferred = pick_backend(job_file, overrides, backend)
    impl = get_backend(backend)
    options = impl.launch_options(wait, timeout)  # its own options, refused before anything is rendered
    if preflight is not None:
        overrides = [*overrides, f"resilience.preflight.enabled={str(preflight).lower()}"]
    job = load(job_file, overrides, backend, check_files=not impl.remote_paths)
    if inferred:
        click.echo(inferred)
    from mtk.spec.fetch_checks import unverified_fetches

    for line in unverified_fetches(job):
        click.echo(line, err=True)
    if megatron_recheck or (megatron_check if megatron_check is not None else impl.megatron_check_by_default):
        from ..megatron_check import enforce

        note = enforce(job, job_file, recheck=megatron_recheck, say=lambda line: click.echo(line, err=True)).note
        if note:
            click.echo(f"note: {note}", err=True)
    job = resolve_paths(job, backend)
    target = launch_run_dir(job, run_dir)  # the one home of this choice: mtk render/validate use it too
    if impl.excludes_nodes:  # a relaunch avoids the nodes earlier attempts of the run excluded
        from mtk.exclusions import with_recorded_exclusions

        job, note = with_recorded_exclusions(job, target)
        if note:
            click.echo(f"note: {note}", err=True)
    check_launch_outputs(job, backend, target, dry_run)
    if not dry_run:  # reads the checkpoint to resume, writes nothing: a refusal (or worse) leaves no run dir, no lease
        from ..launch_checks import check_resume

        check_resume(impl, job, target)
    made: list[Path] = []
    if run_dir is None and out is None:  # made now, exclusively: a launch in the same second gets a dir of its own
        here = Path("runs") if impl.remote_paths or (dry_run and not impl.previews_in_run_dir) else None
        made, reserved = reserve_run_dir(target, here)
        target = str(reserved)
    claim = None
    try:
        job, pinned = impl.pin_image(job)
        if pinned:
            click.echo(pinned)  # stdout: stderr stays for the one error line, if any
        if not dry_run:
            from ..launch_checks import check_before_submit

            require(job, backend)
            claim = check_before_submit(impl, job, target)  # the checkpoint dir's lease, now held for this run
        artifacts = with_args_file(impl.render(job, target), job)  # the Megatron-LM arguments the run starts as
        if impl.remote_paths:  # e.g. EKS: the run dir is a pod path on FSx
            artifacts = dataclasses.replace(artifacts, record_dir=str(Path("runs").absolute() / Path(target).name))
        if not dry_run:
            impl.check_render(artifacts)  # e.g. a manifest Kubernetes would refuse: refused before the run dir fills
            artifacts.write()
    except BaseException:  # refused or failed before anything was written: leave no empty run dir, no lease
        if claim is not None:
            claim.give_back()
        for path in made:
            try:
                path.rmdir()
            except OSError:  # not empty: something was written, keep it
                break
        raise
    if dry_run:
        # A preview never writes into the cluster's paths (a laptop as root would create /fsx/runs/<run>).
        preview = out or (target if impl.previews_in_run_dir else
                          artifacts.record_dir or str(Path("runs").absolute() / Path(target).name))
        artifacts = dataclasses.replace(artifacts, record_dir=str(Path(preview).absolute()))
        artifacts.write()
        click.echo(artifacts.describe())
        click.echo(f"dry run: nothing submitted; preview written to {artifacts.record_dir}"
                   + ("" if artifacts.record_dir == artifacts.run_dir else f" (the run dir {artifacts.run_dir} "
                                                                           "was not created)"))
        _interval_advice(impl, job)
        return
    stopped = None
    try:
        run = impl.submit(job, artifacts, options)
    except SubmitStopped as exc:
        if exc.run is None:  # submit attaches the run; without it there is nothing to record
            if claim is not None:
                claim.give_back()
            raise
        run, stopped = exc.run, exc
    except BaseException as exc:  # the run dir exists: its record says the launch failed, then the error shows
        from ..failed_launch import record_failed_launch

        if claim is not None:
            claim.give_back()
        record_failed_launch(backend, job.name, artifacts.run_dir, artifacts.record_dir or "", exc)
        raise
    if claim is not None:
        claim.hand_over(run)
    run.record_dir = artifacts.record_dir or ""
    run.save()
    for step, ident in run.ids.items():
        click.echo(f"{step}: {ident}")
    click.echo(f"run: {run.record_dir or run.run_dir}")
    _interval_advice(impl, job)
    note = impl.submitted_note(run, options, stopped)
    if note:
        click.echo(note, err=True)
    if stopped is not None:
        raise SystemExit(stopped.exit_code)
    if follow if follow is not None else impl.follows_by_default:
        try:
            for line in impl.logs(run, follow=True):
                click.echo(line, nl=False)
        except KeyboardInterrupt:  # the user's Ctrl-C, no error: say what became of the run, end as a shell does
            if not impl.interrupt_cancels:
                click.echo(f"\nstopped following; the run goes on: mtk logs -f {run.run_dir}", err=True)
                raise SystemExit(INTERRUPTED) from None
            click.echo("\ninterrupted: cancelling the run (it saves a checkpoint first)", err=True)
            impl.cancel(run)
            followed_exit_code(impl.status(run))  # how it ended: where it saved, or what did not finish
            raise SystemExit(INTERRUPTED) from None
        code = followed_exit_code(impl.status(run))
        if code:
            raise SystemExit(code)


def _interval_advice(impl, job) -> None:
    """A cluster's job, once rendered or submitted: the checkpoint interval its nodes' failure rate asks for (#45;
    after the launch's own lines, so a refused launch still says only its error)."""
    if impl.excludes_nodes:
        from mtk.goodput import advice_lines

        click.echo("\n".join(advice_lines(job)))


def followed_exit_code(states) -> int:
    """The exit code of a launch that followed its run to the end, each step that did not complete on stderr:
    0 completed; 43 (``exitcodes.STOPPED``) stopped by ``mtk stop`` with its checkpoint saved, so a script can
    tell "stopped as asked, launch again to resume" from a failure; 1 anything else. A step the run ended without
    needing (a Slurm successor cancelled because the run completed or stopped) is left out."""
    from mtk.exitcodes import FAILED, OK, STOPPED
    from mtk.steps import StepState

    unfinished = [s for s in states if s.state != StepState.COMPLETED and s.needed]
    for s in unfinished:
        click.echo(f"{s.step}: {s.state} exit={s.exit_code} {s.reason}".rstrip(), err=True)
    if not unfinished:
        return OK
    stopped = [s for s in unfinished if s.state == StepState.STOPPED]
    rest = [s for s in unfinished if s.state != StepState.STOPPED and not s.reason.startswith("the run was stopped")]
    return STOPPED if stopped and not rest else FAILED
