"""Checks of the recipe settings (``train.fp8``, gradient-reduce dtype, decoupled LR, NaN check): a setting that
cannot take effect with the rest of the spec is refused, never silently ignored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import check
from .errors import Problem
from .train import Fp8Spec

if TYPE_CHECKING:
    from .job import Job


@check
def fp8_settings_need_fp8(job: Job, backend) -> list[Problem]:
    t = job.train
    if t.fp8 is None:
        return []
    f = t.fp8
    if t.precision != "fp8":
        return [Problem("train.fp8", f"only applies with train.precision: fp8 (this job trains in {t.precision}); "
                        "remove the block or set precision: fp8")]
    out = []
    if f.recipe != "delayed":  # compared with the defaults: the serialised spec carries every field
        default = Fp8Spec()
        out += [Problem(f"train.fp8.{name}", f"only applies to the delayed recipe (train.fp8.recipe is {f.recipe})",
                        getattr(f, name)) for name in ("amax_history_len", "amax_compute_algo")
                if getattr(f, name) != getattr(default, name)]
    if f.param_gather and not job.parallel.distributed_optimizer:
        out.append(Problem("train.fp8.param_gather", "FP8 parameter all-gather needs the distributed optimizer; set "
                           "parallel.distributed_optimizer: true or param_gather: false", True))
    if f.param_gather and f.recipe != "delayed":
        out.append(Problem("train.fp8.param_gather", f"mtk gathers FP8 parameters with the delayed recipe only "
                           f"(train.fp8.recipe is {f.recipe}); set param_gather: false", True))
    return out


@check
def bf16_grad_reduce_needs_bf16(job: Job, backend) -> list[Problem]:
    t = job.train
    if t.grad_reduce_dtype == "bf16" and t.precision not in ("bf16", "fp8"):
        return [Problem("train.grad_reduce_dtype", f"bf16 gradient buffers need train.precision bf16 or fp8 (got "
                        f"{t.precision}); use auto or fp32", "bf16")]
    return []


@check
def decoupled_lr_is_complete(job: Job, backend) -> list[Problem]:
    t = job.train
    if t.decoupled_min_lr is None:
        return []
    if t.decoupled_lr is None:
        return [Problem("train.decoupled_min_lr", "needs train.decoupled_lr (the embedding/output layers' peak LR)",
                        t.decoupled_min_lr)]
    if t.decoupled_min_lr > t.decoupled_lr:
        return [Problem("train.decoupled_min_lr", f"is above train.decoupled_lr ({t.decoupled_lr})",
                        t.decoupled_min_lr)]
    return []


@check
def nan_check_not_with_loss_scaling(job: Job, backend) -> list[Problem]:
    t = job.train
    if t.check_nan_in_grad and t.precision == "fp16":
        return [Problem("train.check_nan_in_grad", "fp16's dynamic loss scaler treats inf/NaN gradients as an "
                        "overflow and skips the step; a NaN check would stop the run instead. Leave it unset "
                        "(off with fp16) or train in bf16", True)]
    return []
