"""``model``: architecture and sizes, from a preset and/or explicit fields."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import Field, model_validator

from .base import Section
from .presets import PRESETS


class MoESpec(Section):
    """Mixture of Experts. ``num_experts: 0`` (the default) means a dense model."""

    num_experts: int = Field(0, ge=0, le=2**16, description="Experts per MoE layer; 0 disables MoE.")
    router_topk: int = Field(2, ge=1, description="Experts each token is routed to.")
    aux_loss_coeff: float = Field(1e-2, ge=0, description="Load-balancing loss coefficient.")
    ffn_hidden_size: int | None = Field(None, ge=1, le=2**22,
                                        description="Expert FFN size (defaults to the dense FFN).")
    capacity_factor: float | None = Field(None, gt=0, description="Token drop capacity; None = dropless.")


class ModelSpec(Section):
    """The network. Set ``preset`` and override any field, or give every size explicitly."""

    preset: str | None = Field(None, description=f"One of: {', '.join(PRESETS)}.")
    arch: Literal["gpt", "llama"] = Field("gpt", description="gpt: GELU/LayerNorm; llama: RoPE/SwiGLU/RMSNorm.")
    num_layers: int = Field(..., ge=1, le=10_000, description="Transformer layers.")
    hidden_size: int = Field(..., ge=1, le=2**20, description="Model width.")
    ffn_hidden_size: int | None = Field(None, ge=1, le=2**22, description="MLP width (default 4 × hidden).")
    num_attention_heads: int = Field(..., ge=1, le=2**16, description="Attention heads.")
    num_query_groups: int | None = Field(None, ge=1, description="GQA groups (default: heads, i.e. MHA).")
    seq_length: int = Field(..., ge=1, le=2**24, description="Training sequence length in tokens.")
    max_position_embeddings: int | None = Field(None, ge=1, le=2**24, description="Position table size (default seq).")
    vocab_size: int = Field(50257, ge=1, le=2**31 - 1,
                            description="Vocabulary size before padding (mock data / no tokenizer).")
    make_vocab_size_divisible_by: int = Field(128, ge=1, le=2**16,
                                              description="Pad the vocab to a multiple of this × tp.")
    position_embedding: Literal["learned_absolute", "rope"] = "learned_absolute"
    rotary_base: float = Field(10000.0, gt=0, description="RoPE base.")
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    norm_epsilon: float = Field(
        1e-5, gt=0, lt=1, description="Epsilon of every LayerNorm/RMSNorm (--norm-epsilon; megatron-core's "
        "layernorm_epsilon). A Hugging Face export writes it as rms_norm_eps / layer_norm_epsilon and an import "
        "reads it from there.")
    activation: Literal["gelu", "swiglu"] = "gelu"
    untie_embeddings: bool = Field(False, description="Separate output layer weights.")
    layernorm_1p: bool = Field(
        False, description="Zero-centred norm weights (--apply-layernorm-1p): the norm scales by 1 + w with w "
        "initialised to 0, so weight decay pulls the scale towards 1, not 0 (NVIDIA's Llama-3-8B recipe).")
    attention_softmax_in_fp32: bool = Field(
        False, description="Attention softmax in fp32 for a bf16/fp16 model (--attention-softmax-in-fp32). Off, as in "
        "Megatron-LM: the local layer spec then runs the softmax in the model's dtype; on, it upcasts the "
        "[batch, heads, seq, seq] scores (on an H200 mtk ran a GPT-125M 16% slower with it on). Transformer "
        "Engine's fused attention keeps its own fp32 accumulation either way.")
    attention_backend: Literal["auto", "sdpa", "unfused", "te"] = Field(
        "auto", description="Core attention. auto: Transformer Engine's fused attention where TE is installed, "
        "else torch's scaled_dot_product_attention (flash/cuDNN kernels) on a GPU and megatron-core's "
        "unfused DotProductAttention on CPU (the computation Megatron-LM's local spec runs, so CPU runs compare "
        "bit for bit). sdpa/unfused/te ask for one; te stops a run whose image lacks Transformer Engine. Core "
        "attention holds no parameters: checkpoints are the same whichever computes it.")
    add_bias_linear: bool = True
    hidden_dropout: float = Field(0.1, ge=0, le=1)
    attention_dropout: float = Field(0.1, ge=0, le=1)
    init_method_std: float = Field(0.02, gt=0)
    moe: MoESpec = Field(default_factory=MoESpec)

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data):
        """Fill fields from the preset; explicit fields win."""
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if not isinstance(name, str) or name not in PRESETS:
            close = difflib.get_close_matches(str(name), PRESETS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ValueError(f"unknown preset '{name}': {hint}choose one of {', '.join(PRESETS)}")
        return {**PRESETS[name], **data}

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def max_positions(self) -> int:
        return self.max_position_embeddings or self.seq_length
