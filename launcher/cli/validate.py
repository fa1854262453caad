"""``mtk validate``: check a spec and show what it resolves to."""

from __future__ import annotations

import click

from .common import backend_option, handles_spec_errors, job_argument, load, set_option


def _human(n: int) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


@click.command("validate")
@job_argument
@set_option
@backend_option
@click.option("--check-files", is_flag=True, help="Also check that data and tokenizer files exist here.")
@click.option("--quiet", "-q", is_flag=True, help="Only the figures, not the resolved spec.")
@handles_spec_errors
def command(job_file, overrides, backend, check_files, quiet):
    """Check JOB.yaml and print the resolved spec and derived figures."""
    import yaml

    from ..figures import compute

    job = load(job_file, overrides, backend, check_files)
    if not quiet:
        click.echo(yaml.safe_dump(job.model_dump(mode="json"), sort_keys=False).rstrip())
        click.echo("---")
    f = compute(job)
    click.echo(f"world size:              {f.world_size}")
    click.echo(f"data parallel:           {f.data_parallel}")
    click.echo(f"micro-batches per step:  {f.micro_batches_per_step}")
    click.echo(f"parameters:              {_human(f.parameters)} ({f.parameters:,})")
    if f.active_parameters != f.parameters:
        click.echo(f"active parameters:       {_human(f.active_parameters)}")
    click.echo(f"tokens per step:         {f.tokens_per_step:,}")
    click.echo(f"memory per GPU (weights+grads+optimizer): {f.gib_per_gpu} GiB; "
               f"with distributed optimizer: {f.gib_per_gpu_distributed_optimizer} GiB")
    from mtk.training.device_plan import describe_for_validate

    for line in describe_for_validate(job):
        click.echo(line)
    click.echo(f"steps: {' -> '.join(job.steps())}")
    click.echo("ok")
