"""Megatron DDP wrapping, ``get_megatron_optimizer`` (Adam) and the LR schedule from ``job.train``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mtk import megatron_flags

from .model import core_kwargs

if TYPE_CHECKING:
    from mtk.spec import Job

    from .device_plan import DevicePlan


def wrap_ddp(job: Job, config, chunks: list, plan: DevicePlan) -> list:
    """Float16Module for bf16/fp16 (megatron keeps fp32 main params in the optimizer), then Megatron DDP.

    Gradient buffer dtype and the NaN/Inf check before the reduce come from the device plan.

    ``get_megatron_optimizer`` needs the Megatron DDP wrapper (it reads ``ddp_config`` off the chunks).
    Overlap of grad reduce / param gather follows the device plan; with overlap megatron picks its own
    bucket size (bucketing is what lets the reduce of early buckets run during the rest of the backward),
    and, as in Megatron-LM, only the first chunk of the first pipeline stage is bucketed.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer.module import Float16Module

    if job.train.precision in ("bf16", "fp16", "fp8"):
        chunks = [Float16Module(config, c) for c in chunks]
    pp_rank = ps.get_pipeline_model_parallel_rank()
    wrapped = []
    for i, c in enumerate(chunks):
        wrapped.append(DistributedDataParallel(config=config, ddp_config=ddp_config(job, plan), module=c,
                                               disable_bucketing=(i > 0 or pp_rank > 0)))
    return wrapped


def ddp_config(job: Job, plan: DevicePlan):
    """Megatron DDP's config, from the flag table: the distributed optimizer, and what the device plan resolves —
    overlap, gradient buffer dtype, the NaN/Inf check, FP8 param gather (Megatron-LM sets the DDP flag and
    TransformerConfig.fp8_param both from --fp8-param-gather) and megatron-core's own bucket size."""
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(**core_kwargs(job, megatron_flags.DDP, plan))


def set_sync_funcs(config, model: list, plan: DevicePlan) -> None:
    """Hand the schedule DDP's hooks, as Megatron-LM's training loop does: ``no_sync`` (grads are reduced
    once, after the last micro-batch), and with overlap the grad-sync / param-sync launchers that let
    pipeline stages start their reduce-scatter / all-gather as soon as their chunk is done."""

    def one_or_list(funcs: list):
        return funcs[0] if len(funcs) == 1 else funcs

    config.no_sync_func = one_or_list([m.no_sync for m in model])
    if plan.overlap_grad_reduce:
        config.grad_sync_func = one_or_list([m.start_grad_sync for m in model])
    if plan.overlap_param_gather and plan.align_param_gather:
        config.param_sync_func = one_or_list([m.start_param_sync for m in model])


@contextlib.contextmanager
def params_synced(model: list, optimizer, plan: DevicePlan) -> Iterator[None]:
    """With overlapped param all-gather the model's parameters are only complete after the next forward's
    pre-hooks; evaluation and checkpointing need them now. Force the gather and run without the hooks
    (Megatron-LM's disable/enable_forward_pre_hook), then re-arm them."""
    if not plan.overlap_param_gather:
        yield
        return
    optimizer.prepare_model_params_for_param_sync()
    for chunk in model:
        chunk.disable_forward_pre_hook(param_sync=True)
    try:
        yield
    finally:
        for chunk in model:
            chunk.enable_forward_pre_hook()


def optimizer_config(job: Job, plan: DevicePlan | None = None):
    """megatron-core's OptimizerConfig from the flag table: Adam, lr, clipping, precision and parameter dtype, the
    loss scale, the distributed optimizer, decoupled_lr/min_lr (which megatron-core's standard param-group overrides
    give the embedding and output layers as their max_lr/min_lr) and, with ``plan``, the overlapped param gather
    (megatron wants it to agree with the DDP config's)."""
    from megatron.core.optimizer import OptimizerConfig

    return OptimizerConfig(**core_kwargs(job, megatron_flags.OC, plan))


def build_optimizer(job: Job, model: list, plan: DevicePlan):
    """megatron-core's optimizer; with ``plan.adam == "torch-fused"`` its torch Adam steps in one fused kernel."""
    from megatron.core.optimizer import get_megatron_optimizer

    optimizer = get_megatron_optimizer(optimizer_config(job, plan), model)
    if plan.adam == "torch-fused":
        from .fused_adam import use_fused_kernel

        use_fused_kernel(optimizer)
    return optimizer


def build_scheduler(job: Job, optimizer):
    """Megatron's OptimizerParamScheduler, stepped once per iteration (sample counts are iterations × gbs).

    On resume, ``train.lr_schedule_on_resume`` decides whose schedule wins when the checkpoint's differs from the
    spec's: ``keep`` loads the checkpoint's (``use_checkpoint_opt_param_scheduler``), ``replan`` the spec's at the
    checkpoint's step (``override_opt_param_scheduler``). Megatron-LM's default, asserting they match, is not
    offered: extending ``train.iterations`` is the common case and must work; ``training/lr_resume.py`` logs the
    difference either way.
    """
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    # peak/final LR, warmup and decay in samples, style, weight decay and its (constant) schedule, and whose
    # schedule wins on resume: the flag table's, as Megatron-LM's get_optimizer_param_scheduler computes them
    return OptimizerParamScheduler(optimizer, **core_kwargs(job, megatron_flags.SCHEDULER))


def batch_calculator(job: Job, dp_size: int, rank: int):
    """megatron-core's micro-batch calculator for ``train.batch_size_schedule`` (None for a constant global batch):
    the one Megatron-LM's loop asks, each iteration, for the batch at the samples consumed so far — its thresholds
    (tokens ÷ seq length), micro batch and schedule from the flag table."""
    if not job.train.batch_size_schedule:
        return None
    from megatron.core.num_microbatches_calculator import StepBatchsizeNumMicroBatchesCalculator

    return StepBatchsizeNumMicroBatchesCalculator(**core_kwargs(job, megatron_flags.CALCULATOR),
                                                  data_parallel_size=dp_size, decrease_batch_size_if_needed=False,
                                                  rank=rank)
