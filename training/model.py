"""Build megatron.core's GPTModel (GPT or Llama-style, dense or MoE) from ``job.model``.

Layer spec (Transformer Engine when it imports, megatron.core's local spec otherwise) and fused kernels
come from the run's :class:`~mtk.training.device_plan.DevicePlan`. The chunks are moved to the
accelerator here, before Float16Module/DDP wrapping, as Megatron-LM does.

The vocabulary is :func:`mtk.vocabulary.built`'s (the tokenizer's, padded to ``make_vocab_size_divisible_by × tp``),
the same function ``mtk validate`` plans with, so its parameter count is the built model's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mtk import megatron_flags
from mtk.vocabulary import built

from .device_plan import DevicePlan, have_apex, plan_for_here

if TYPE_CHECKING:
    import torch

    from mtk.spec import Job


def params_dtype(precision: str) -> torch.dtype:
    import torch

    return getattr(torch, megatron_flags.dtype_name(precision))


def torch_values() -> dict[str, Any]:
    """The engine's side of the table's plain values: a dtype and an activation by name (``Derived.kind``)."""
    import torch
    import torch.nn.functional as F

    return {"dtype": lambda name: getattr(torch, name), "function": lambda name: getattr(F, name)}


def core_kwargs(job: Job, target: str, plan: DevicePlan | None = None) -> dict[str, Any]:
    """``target``'s arguments from the flag table, with torch's values where the table names them."""
    return megatron_flags.core_kwargs(job, target, plan, torch_values())


def transformer_config_kwargs(job: Job, cpu: bool, plan: DevicePlan | None = None) -> dict[str, Any]:
    """The TransformerConfig arguments for this job (plain data, testable without torch.distributed): every one from
    the flag table — the spec's sizes and recipe, and the fusions, precision and recompute the device plan
    (default: the plan for this machine's libraries) resolves."""
    return core_kwargs(job, megatron_flags.TC, plan or plan_for_here(job, gpu=not cpu))


def transformer_config(job: Job, plan: DevicePlan):
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(**transformer_config_kwargs(job, plan.device == "cpu", plan))


def layer_spec(job: Job, use_te: bool, config=None, vp_stage: int | None = None, attention: str | None = None):
    """The module spec: TE when available, megatron.core's local modules otherwise, with the core attention the
    device plan chose (``attention``: "te", "sdpa" or "unfused"; None keeps the spec's own).

    Local spec + sequence parallel without Apex, or + layernorm-1p: the norms are swapped for mtk's
    ``TorchNorm`` (megatron's torch fallback refuses both), which needs a block-level spec to reach the final
    norm too. TE's norms do both themselves.
    """
    from megatron.core.models.gpt import gpt_layer_specs as specs

    if use_te:
        spec = specs.get_gpt_layer_with_transformer_engine_spec(**core_kwargs(job, megatron_flags.TE_SPEC))
        set_core_attention(spec, attention)
        return spec
    spec = specs.get_gpt_layer_local_spec(**core_kwargs(job, megatron_flags.LOCAL_SPEC))
    set_core_attention(spec, attention)
    if not ((job.parallel.sequence_parallel and not have_apex()) or job.model.layernorm_1p):
        return spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    from .norms import TorchNorm

    spec.submodules.input_layernorm = TorchNorm
    spec.submodules.pre_mlp_layernorm = TorchNorm
    n = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[spec] * n, layer_norm=TorchNorm)


def set_core_attention(spec, attention: str | None) -> None:
    """Put the chosen core-attention module in the layer spec's ``core_attention`` slot ("te" with a TE spec
    keeps TE's own)."""
    if attention is None or attention == "te":
        return
    module: type
    if attention == "sdpa":
        from .sdpa_attention import SDPAttention

        module = SDPAttention
    else:
        from megatron.core.transformer.dot_product_attention import DotProductAttention

        module = DotProductAttention
    spec.submodules.self_attention.submodules.core_attention = module


def model_vocab_size(job: Job, vocab_size: int | None = None) -> int:
    """Padded vocabulary size of the embedding/output layers. ``vocab_size``: the tokenizer's (``tokenizer_info``);
    None finds it as ``mtk validate`` does (:func:`mtk.vocabulary.built`)."""
    return built(job, vocab_size).padded


def build_model(job: Job, config, vocab_size: int | None, plan: DevicePlan, on_device: bool = True) -> list:
    """The model chunks of this pipeline rank (one per virtual stage) on the accelerator, not yet wrapped.

    ``use_cpu_initialization`` (CPU) and torch-native modules (local-spec norms) leave parameters on the
    host; ``.cuda()`` moves them, as Megatron-LM's ``get_model`` does before wrapping. ``on_device=False``
    keeps them where they were built (``mtk validate`` builds on the meta device, which has nothing to move).
    """
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    vp = job.parallel.virtual_pp
    settings = core_kwargs(job, megatron_flags.GPT)  # positions, RoPE, tied embeddings: the flag table's
    chunks = []
    for stage in range(vp or 1):
        spec = layer_spec(job, plan.layer_spec == "transformer_engine", config, stage if vp else None,
                          plan.attention)
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage if vp else None)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage if vp else None)
        chunks.append(GPTModel(
            config=config,
            transformer_layer_spec=spec,
            vocab_size=model_vocab_size(job, vocab_size),
            pre_process=pre,
            post_process=post,
            vp_stage=stage if vp else None,
            **settings,
        ))
    if on_device:
        for chunk in chunks:
            chunk.cuda(torch.cuda.current_device())
    return chunks
