"""Megatron DDP wrapping, ``get_megatron_optimizer`` (Adam) and the LR schedule from ``job.train``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtk.launcher.spec import Job


def wrap_ddp(job: Job, config, chunks: list) -> list:
    """Float16Module for bf16/fp16 (megatron keeps fp32 main params in the optimizer), then Megatron DDP.

    ``get_megatron_optimizer`` needs the Megatron DDP wrapper (it reads ``ddp_config`` off the chunks).
    """
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer.module import Float16Module

    if job.train.precision in ("bf16", "fp16", "fp8"):
        chunks = [Float16Module(config, c) for c in chunks]
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=job.parallel.distributed_optimizer,
        check_for_nan_in_grad=False,
        bucket_size=None,
    )
    return [
        DistributedDataParallel(config=config, ddp_config=ddp_config, module=c,
                                disable_bucketing=(i > 0))
        for i, c in enumerate(chunks)
    ]


def optimizer_config(job: Job):
    from megatron.core.optimizer import OptimizerConfig

    from .model import params_dtype

    t = job.train
    return OptimizerConfig(
        optimizer="adam",
        lr=t.lr,
        min_lr=t.min_lr,
        weight_decay=t.weight_decay,
        adam_beta1=t.adam_beta1,
        adam_beta2=t.adam_beta2,
        adam_eps=t.adam_eps,
        clip_grad=t.clip_grad,
        bf16=t.precision in ("bf16", "fp8"),
        fp16=t.precision == "fp16",
        params_dtype=params_dtype(t.precision),
        initial_loss_scale=t.initial_loss_scale,
        use_distributed_optimizer=job.parallel.distributed_optimizer,
    )


def build_optimizer(job: Job, model: list):
    from megatron.core.optimizer import get_megatron_optimizer

    return get_megatron_optimizer(optimizer_config(job), model)


def build_scheduler(job: Job, optimizer):
    """Megatron's OptimizerParamScheduler, stepped once per iteration (sample counts are iterations × gbs).

    On resume the job spec's schedule wins over the checkpoint's (``override_opt_param_scheduler``): only
    the step count comes from the checkpoint, so extending ``train.iterations`` re-plans the decay instead
    of failing (Megatron-LM's default) or silently keeping the old horizon.
    """
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    t = job.train
    gbs = t.global_batch_size
    return OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=t.lr,
        min_lr=t.min_lr,
        lr_warmup_steps=t.lr_warmup_iters * gbs,
        lr_decay_steps=(t.lr_decay_iters or t.iterations) * gbs,
        lr_decay_style=t.lr_decay_style,
        start_wd=t.weight_decay,
        end_wd=t.weight_decay,
        wd_incr_steps=t.iterations * gbs,
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=True,
    )
