"""The one place that decides, per device, the layer spec, the fused kernels and the communication overlap.

The engine (``model``/``optim``) builds from this plan and ``mtk validate`` prints it, so what a GPU run
will use is visible before any GPU time is spent. Plain data in, plain data out: no torch import, so the
CLI can call it cheaply; the probes for Transformer Engine / Apex live in :func:`probe`.

Rules (megatron-core 0.19.2):

* Transformer Engine spec when TE imports, megatron-core's local spec otherwise.
* Fusions are CUDA kernels: all off on CPU. On GPU, bias-activation / bias-dropout / masked-softmax
  fusions are megatron-core's own (always available; fused bias-GELU needs a bias), gradient-accumulation
  fusion needs TE's linear layers or Apex's ``fused_weight_gradient_mlp_cuda``, RoPE fusion needs TE,
  persistent layer norm needs Apex.
* Overlap of the data-parallel gradient reduce-scatter / all-reduce with the backward pass (megatron DDP's
  ``overlap_grad_reduce``) on GPU whenever data parallelism > 1; parameter all-gather overlap with the next
  forward (``overlap_param_gather`` + ``align_param_gather``) only with the distributed optimizer. Both
  need the streams/events of CUDA, so CPU runs reduce synchronously.
* Core attention (``model.attention_backend``, auto): Transformer Engine's where TE imports; else on GPU torch's
  ``scaled_dot_product_attention`` (:mod:`mtk.training.sdpa_attention`; flash/cuDNN kernels, no s×s scores), on
  CPU megatron-core's unfused ``DotProductAttention``, the computation Megatron-LM's local spec runs, so CPU runs
  compare bit for bit with it. Context parallelism needs TE's attention (the engine refuses it without TE).
* Adam: TE's FusedAdam, else Apex's (what megatron-core imports); without either torch's Adam, switched to its
  fused kernel on GPU (:mod:`mtk.training.fused_adam`; ~3× faster than the ``foreach`` default at 1.3B) and left
  on ``foreach`` on CPU.
* NVIDIA's H100 recipe (``train_llama3_8b_h100_fp8.sh``) where the spec leaves the choice to the device:
  gradients accumulated and reduced in bf16 (``train.grad_reduce_dtype: auto``) and the fused cross entropy
  (``train.cross_entropy_fusion`` unset) on GPU; fp32 buffers and the plain loss on CPU. FP8 parameter
  all-gather when fp8 runs with the distributed optimizer and the delayed recipe; the NaN/Inf gradient check
  on except with fp16, whose loss scaler treats an overflow as a skipped step (Megatron-LM's rule).
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtk.spec import Job


@dataclass(frozen=True)
class DevicePlan:
    """What one run uses; field names match megatron-core's config fields where there is one."""

    device: str                      # "gpu" or "cpu"
    layer_spec: str                  # "transformer_engine" or "local"
    bias_activation_fusion: bool
    bias_dropout_fusion: bool
    masked_softmax_fusion: bool
    gradient_accumulation_fusion: bool
    apply_rope_fusion: bool
    persist_layer_norm: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    align_param_gather: bool
    grad_reduce_in_fp32: bool = True
    cross_entropy_loss_fusion: bool = False
    fp8_param: bool = False
    check_for_nan_in_grad: bool = True
    attention: str = "unfused"       # "te", "sdpa" (torch SDPA) or "unfused" (megatron-core's DotProductAttention)
    adam: str = "torch-foreach"      # "te-fused", "apex-fused", "torch-fused" or "torch-foreach"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        """One line for logs and ``mtk validate``."""
        fused = [name for name, on in (
            ("bias-act", self.bias_activation_fusion), ("bias-dropout", self.bias_dropout_fusion),
            ("softmax", self.masked_softmax_fusion), ("grad-accum", self.gradient_accumulation_fusion),
            ("rope", self.apply_rope_fusion), ("persist-LN", self.persist_layer_norm)) if on]
        overlap = [name for name, on in (("grad-reduce", self.overlap_grad_reduce),
                                         ("param-gather", self.overlap_param_gather)) if on]
        if self.cross_entropy_loss_fusion:
            fused.append("cross-entropy")
        spec = "TE" if self.layer_spec == "transformer_engine" else "local"
        return (f"{spec} layer spec; attention: {ATTENTION_NAMES[self.attention]}; "
                f"Adam: {ADAM_NAMES[self.adam]}; fused: {', '.join(fused) or 'none'}; "
                f"overlap: {', '.join(overlap) or 'off'}; grad reduce: {'fp32' if self.grad_reduce_in_fp32 else 'bf16'}"
                f"{'; fp8 param gather' if self.fp8_param else ''}; "
                f"NaN grad check: {'on' if self.check_for_nan_in_grad else 'off'}")


ATTENTION_NAMES = {"te": "Transformer Engine", "sdpa": "torch SDPA (flash/cuDNN)",
                   "unfused": "megatron-core unfused"}
ADAM_NAMES = {"te-fused": "TE FusedAdam", "apex-fused": "Apex FusedAdam", "torch-fused": "torch fused",
              "torch-foreach": "torch foreach"}


def attention_choice(job: Job, gpu: bool, te: bool) -> str:
    """Which module computes core attention: the spec's ``model.attention_backend``, or for ``auto`` TE where it
    imports, torch SDPA on a GPU (unless context parallelism needs TE's), megatron-core's unfused one on CPU."""
    asked = job.model.attention_backend
    if asked != "auto":
        return asked
    if te:
        return "te"
    return "sdpa" if gpu and job.parallel.cp == 1 else "unfused"


def adam_choice(gpu: bool, te: bool, apex: bool) -> str:
    """The Adam megatron-core builds (TE's, else Apex's FusedAdam, else torch's) and mtk's kernel for torch's."""
    if te:
        return "te-fused"
    if apex:
        return "apex-fused"
    return "torch-fused" if gpu else "torch-foreach"


def have_transformer_engine() -> bool:
    """True when Transformer Engine imports (GPU images); a broken TE install counts as absent."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # a broken TE install must not stop a run that can use the local spec
        return False
    return True


def have_apex() -> bool:
    return importlib.util.find_spec("apex") is not None


def have_grad_accum_kernel() -> bool:
    """Apex's CUDA extension that megatron-core's local linear layers use for gradient-accumulation fusion."""
    return importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None


def have_softmax_kernels() -> bool:
    """The CUDA extensions megatron-core's local attention calls when masked-softmax fusion is on (built by Apex or
    Megatron-LM's fused kernels). Without them that fusion fails at the first forward with ModuleNotFoundError
    (seen on an H200 with megatron-core 0.19.2 and no Apex), so the plan leaves it off."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda"))


def probe() -> tuple[bool, bool, bool, bool]:
    """(Transformer Engine, Apex, Apex grad-accumulation kernel, fused softmax kernels) importable here."""
    return have_transformer_engine(), have_apex(), have_grad_accum_kernel(), have_softmax_kernels()


def plan(job: Job, gpu: bool, te: bool, apex: bool = False, grad_accum_kernel: bool = False,
         dp_size: int | None = None, softmax_kernels: bool = False) -> DevicePlan:
    """The plan for ``job`` on a GPU (``gpu=True``) or CPU machine with the given libraries present.

    ``dp_size`` defaults to the spec's world size / (tp × pp × cp). With Transformer Engine its attention
    brings its own softmax; the local spec fuses it only where the kernels import (``softmax_kernels``).
    """
    m, p = job.model, job.parallel
    if dp_size is None:
        dp_size = max(1, job.cluster.world_size // (p.tp * p.pp * p.cp))
    swiglu = m.activation == "swiglu"
    rope = m.position_embedding == "rope"
    overlap_grad = gpu and dp_size > 1
    overlap_param = overlap_grad and p.distributed_optimizer
    t = job.train
    low = t.precision in ("bf16", "fp8")
    bf16_reduce = t.grad_reduce_dtype == "bf16" or (t.grad_reduce_dtype == "auto" and gpu and low)
    ce_fusion = gpu if t.cross_entropy_fusion is None else t.cross_entropy_fusion
    f8 = t.fp8_settings
    fp8_param = t.precision == "fp8" and (f8.param_gather if f8.param_gather is not None else
                                          p.distributed_optimizer and f8.recipe == "delayed")
    return DevicePlan(
        device="gpu" if gpu else "cpu",
        layer_spec="transformer_engine" if te else "local",
        bias_activation_fusion=gpu and (swiglu or m.add_bias_linear),
        bias_dropout_fusion=gpu,
        masked_softmax_fusion=gpu and (te or softmax_kernels),
        gradient_accumulation_fusion=gpu and (te or grad_accum_kernel),
        apply_rope_fusion=gpu and te and rope,
        persist_layer_norm=gpu and apex and not te,  # TE layers bring their own norms
        overlap_grad_reduce=overlap_grad,
        overlap_param_gather=overlap_param,
        align_param_gather=overlap_param and p.pp > 1,
        grad_reduce_in_fp32=not bf16_reduce,
        cross_entropy_loss_fusion=ce_fusion,
        fp8_param=fp8_param,
        check_for_nan_in_grad=t.check_nan_in_grad if t.check_nan_in_grad is not None else t.precision != "fp16",
        attention=attention_choice(job, gpu, te),
        adam=adam_choice(gpu, te, apex),
    )


def recipe_line(job: Job) -> str:
    """The numerics of NVIDIA's H100 recipe that the spec sets, as ``mtk validate`` prints them."""
    t, m = job.train, job.model
    parts = []
    if t.precision == "fp8":
        f = t.fp8_settings
        amax = f", amax history {f.amax_history_len} ({f.amax_compute_algo})" if f.recipe == "delayed" else ""
        parts.append(f"fp8 {f.format}/{f.recipe}{amax}")
    if t.decoupled_lr is not None:
        low = "" if t.decoupled_min_lr is None else f" -> {t.decoupled_min_lr:g}"
        parts.append(f"embedding/output LR {t.decoupled_lr:g}{low}")
    parts.append(f"layernorm-1p {'on' if m.layernorm_1p else 'off'}")
    parts.append(f"loss per {'token of the global batch' if t.per_token_loss else 'micro-batch'}")
    every = f" and every {t.manual_gc_interval} iterations" if t.manual_gc_interval else ""
    gc = f"at start, around evaluation{every}" if t.manual_gc else "off"
    parts.append(f"manual GC {gc}")
    return "recipe: " + "; ".join(parts)


def gpu_plans(job: Job) -> dict[str, DevicePlan]:
    """What a GPU run of ``job`` will use, on an image with TE (+Apex) and on one without."""
    return {"with Transformer Engine": plan(job, gpu=True, te=True, apex=True, grad_accum_kernel=True,
                                                   softmax_kernels=True),
            "without Transformer Engine": plan(job, gpu=True, te=False)}


def describe_for_validate(job: Job) -> list[str]:
    """The lines ``mtk validate`` prints: what a run of ``job`` will use on its device, before it runs."""
    if job.cluster.device == "cpu":
        return [f"device plan (cpu/gloo):  {plan(job, gpu=False, te=False).describe()}", recipe_line(job)]
    ngc = job.image.base.startswith("nvcr.io/nvidia/pytorch")
    plans = gpu_plans(job)
    first = "with Transformer Engine" if ngc else "without Transformer Engine"
    lines = [f"device plan (gpu/nccl, {first}{' - NGC PyTorch base image' if ngc else ''}): "
             f"{plans[first].describe()}"]
    other = next(name for name in plans if name != first)
    lines.append(f"  if the image is {other}: {plans[other].describe()}")
    if not plans[first].overlap_grad_reduce:
        lines.append("  no data parallelism: gradients are not reduced across ranks, nothing to overlap")
    return [*lines, recipe_line(job)]


def plan_for_here(job: Job, gpu: bool, dp_size: int | None = None) -> DevicePlan:
    """The plan with this machine's libraries (probes TE/Apex)."""
    te, apex, grad_accum, softmax = probe()
    return plan(job, gpu=gpu, te=te, apex=apex, grad_accum_kernel=grad_accum, dp_size=dp_size,
                softmax_kernels=softmax)
