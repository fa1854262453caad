"""Build megatron.core's GPTModel (GPT or Llama-style, dense or MoE) from ``job.model``.

Layer spec (Transformer Engine when it imports, megatron.core's local spec otherwise) and fused kernels
come from the run's :class:`~mtk.training.device_plan.DevicePlan`. The chunks are moved to the
accelerator here, before Float16Module/DDP wrapping, as Megatron-LM does.

The vocabulary is :func:`mtk.vocabulary.built`'s (the tokenizer's, padded to ``make_vocab_size_divisible_by × tp``),
the same function ``mtk validate`` plans with, so its parameter count is the built model's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mtk.megatron_flags import TC as TRANSFORMER_CONFIG
from mtk.megatron_flags import core_kwargs
from mtk.vocabulary import built

from .device_plan import DevicePlan, have_apex, plan_for_here

if TYPE_CHECKING:
    import torch

    from mtk.spec import Job


def params_dtype(precision: str) -> torch.dtype:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(precision, torch.float32)


def transformer_config_kwargs(job: Job, cpu: bool, plan: DevicePlan | None = None) -> dict[str, Any]:
    """The TransformerConfig arguments for this job (plain data, testable without torch.distributed).

    Fusions come from ``plan`` (default: the plan for this machine's libraries).
    """
    import torch.nn.functional as F

    plan = plan or plan_for_here(job, gpu=not cpu)
    t = job.train
    swiglu = job.model.activation == "swiglu"
    dtype = params_dtype(t.precision)
    kw: dict[str, Any] = dict(
        # sizes, parallelism, bf16/fp16 and MoE (its fixed defaults too): the flag table's one-to-one fields
        core_kwargs(job, TRANSFORMER_CONFIG),
        activation_func=F.silu if swiglu else F.gelu,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        use_cpu_initialization=cpu,
        # megatron-core 0.19's default "full" warns that it is deprecated; [] is its replacement, same meaning
        cuda_graph_modules=[],
        gradient_accumulation_fusion=plan.gradient_accumulation_fusion,
        bias_activation_fusion=plan.bias_activation_fusion,
        bias_dropout_fusion=plan.bias_dropout_fusion,
        masked_softmax_fusion=plan.masked_softmax_fusion,
        apply_rope_fusion=plan.apply_rope_fusion,
        persist_layer_norm=plan.persist_layer_norm,
        deallocate_pipeline_outputs=True,
        cross_entropy_loss_fusion=plan.cross_entropy_loss_fusion,
    )
    if t.precision == "fp8":
        f = t.fp8_settings
        kw.update(fp8=f.format, fp8_recipe=f.recipe, fp8_param=plan.fp8_param)
        if f.recipe == "delayed":
            kw.update(fp8_amax_history_len=f.amax_history_len, fp8_amax_compute_algo=f.amax_compute_algo)
    if t.recompute == "selective":
        kw.update(recompute_granularity="selective")
    elif t.recompute == "full":
        kw.update(recompute_granularity="full", recompute_method="uniform",
                  recompute_num_layers=t.recompute_num_layers)
    return kw


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

    experts = job.model.moe.num_experts or None
    if use_te:
        spec = specs.get_gpt_layer_with_transformer_engine_spec(num_experts=experts, moe_grouped_gemm=False)
        set_core_attention(spec, attention)
        return spec
    spec = specs.get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False,
                                          normalization=job.model.normalization)
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

    m = job.model
    vp = job.parallel.virtual_pp
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
            max_sequence_length=m.max_positions,
            pre_process=pre,
            post_process=post,
            share_embeddings_and_output_weights=not m.untie_embeddings,
            position_embedding_type=m.position_embedding,
            rotary_base=int(m.rotary_base),
            parallel_output=True,
            vp_stage=stage if vp else None,
        ))
    if on_device:
        for chunk in chunks:
            chunk.cuda(torch.cuda.current_device())
    return chunks
