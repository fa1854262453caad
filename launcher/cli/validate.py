"""``mtk validate``: check a spec and show what it resolves to."""

from __future__ import annotations

import click

from .common import backend_option, job_argument, load, pick_backend, set_option


def _human(n: int) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def _fit_line(job, per_rank: int | None) -> str:
    """The estimate against one GPU's memory (the check that refuses a spec over it: spec/memory_checks.py)."""
    from mtk.spec.memory_checks import estimate_gib, gpu_memory

    total = estimate_gib(job, per_rank)[0]
    known = gpu_memory(job)
    if known is None:
        return (f"fits the GPU:            not checked ({total} GiB estimated; set cluster.instance_type or "
                "cluster.gpu_memory_gib)")
    gib, source = known
    verdict = "yes" if total <= gib else "no, accepted by cluster.allow_memory_overcommit"
    return f"fits the GPU:            {verdict}: {total} of {gib} GiB ({source})"


def _render_checks(job, backend: str) -> list[str]:
    """Render the files a launch would submit (nothing written) and check them as the backend would (the EKS
    manifests against the PyTorchJob CRD and Kubernetes' schemas): a refusal is the one error line, exit 2."""
    from mtk.backends import get_backend

    from ..launch_render import render_as_launched

    impl = get_backend(backend)
    artifacts, _ = render_as_launched(impl, job)
    checked = impl.check_render(artifacts)
    return [f"render:                  {len(artifacts.files)} files for {backend}, run dir "
            f"{artifacts.run_dir}", *(f"note: {line}" for line in checked)]


@click.command("validate")
@job_argument
@set_option
@backend_option
@click.option("--check-files", is_flag=True, help="Also check that data and tokenizer files exist here.")
@click.option("--quiet", "-q", is_flag=True, help="Only the figures, not the resolved spec.")
@click.option("--megatron/--no-megatron", "by_megatron", default=True, show_default=True,
              help="Also have megatron-core build its config and the model on the meta device (needs mtk[train]; "
                   "skipped with a note where torch/megatron-core are not installed).")
@click.option("--megatron-recheck", is_flag=True,
              help="Run the megatron-core check even when the cache holds a verdict for this model/parallel/train "
                   "and versions (and refresh it).")
def command(job_file, overrides, backend, check_files, quiet, by_megatron, megatron_recheck):
    """Check JOB.yaml and print the resolved spec and derived figures."""
    import yaml

    from mtk.figures import compute

    if megatron_recheck and not by_megatron:
        raise click.UsageError("--megatron-recheck runs the check that --no-megatron turns off: pass one")
    backend, inferred = pick_backend(job_file, overrides, backend)
    job = load(job_file, overrides, backend, check_files)
    if inferred:
        click.echo(inferred)
    from mtk.spec.fetch_checks import unverified_fetches

    for line in unverified_fetches(job):
        click.echo(line, err=True)
    per_rank, note = None, "megatron-core checks not run (--no-megatron)"
    if by_megatron:
        from ..megatron_check import enforce

        verdict = enforce(job, job_file, recheck=megatron_recheck, say=lambda line: click.echo(line, err=True))
        per_rank, note = verdict.parameters_per_rank, verdict.note
    if not quiet:
        click.echo(yaml.safe_dump(job.model_dump(mode="json"), sort_keys=False).rstrip())
        click.echo("---")
    from mtk.vocabulary import built

    vocab = built(job)
    f = compute(job, per_rank, vocab)
    click.echo(f"world size:              {f.world_size}")
    click.echo(f"data parallel:           {f.data_parallel}")
    click.echo(f"micro-batches per step:  {f.micro_batches_per_step}")
    click.echo(f"parameters:              {_human(f.parameters)} ({f.parameters:,})")
    if f.active_parameters != f.parameters:
        click.echo(f"active parameters:       {_human(f.active_parameters)}")
    click.echo(f"tokens per step:         {f.tokens_per_step:,}")
    if job.train.batch_size_schedule:
        from mtk.batch_schedule import BatchSchedule

        click.echo(f"  {BatchSchedule.of(job).describe(job.train.iterations, job.model.seq_length)} (the figures above "
                   "and the memory below are at the last, largest batch)")
    click.echo(f"vocabulary:              {vocab.size:,} tokens, padded to {vocab.padded:,} "
               f"({vocab.source if vocab.known else 'model.vocab_size, standing in'})")
    if vocab.note(job):
        click.echo(vocab.note(job), err=True)
    source = "megatron-core's meta-device model" if per_rank is not None else "formula"
    click.echo(f"parameters per GPU:      {_human(f.parameters_per_gpu)} ({f.parameters_per_gpu:,}, rank 0, from the "
               f"{source})")
    click.echo(f"memory per GPU (weights+grads+optimizer): {f.gib_per_gpu} GiB; "
               f"with distributed optimizer: {f.gib_per_gpu_distributed_optimizer} GiB")
    t = job.train
    recompute = t.recompute + (f", {t.recompute_num_layers} layer(s) per block" if t.recompute == "full" else "")
    click.echo(f"activations per GPU:     {f.activation_gib_per_gpu} GiB (Megatron-LM's theoretical-memory formula, "
               f"first pipeline stage, recompute {recompute}, fused attention); total "
               f"{f.gib_per_gpu + f.activation_gib_per_gpu:.2f} GiB, with distributed optimizer "
               f"{f.gib_per_gpu_distributed_optimizer + f.activation_gib_per_gpu:.2f} GiB")
    if job.cluster.device == "gpu":
        click.echo(_fit_line(job, per_rank))
    from mtk.training.device_plan import describe_for_validate

    for line in describe_for_validate(job):
        click.echo(line)
    from mtk.netenv import describe as describe_network

    for line in describe_network(job):
        click.echo(line)
    from mtk.goodput import advice_lines

    for line in advice_lines(job):  # Young/Daly interval and goodput at cluster.nodes (issue 45)
        click.echo(line)
    click.echo(f"steps: {' -> '.join(job.steps())}")
    for line in _render_checks(job, backend):
        click.echo(line)
    if note:
        click.echo(f"note: {note}")
    else:
        click.echo("megatron-core: config and model build accepted (meta device)")
    click.echo("ok")
