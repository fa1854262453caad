"""Declarative Megatron ↔ Hugging Face weight tables, one per architecture (pure data + tiny reshapes).

A row maps one megatron-core checkpoint key (a ``torch_dist`` global tensor; the ``decoder.layers.*`` keys
carry a leading layer axis) to one or more Hugging Face keys (``{i}`` is the layer index) and names the
reshape between them. The reshapes, spelled out:

* ``copy``      the same tensor.
* ``vocab``     embedding/output rows: Megatron pads the vocabulary (``make_vocab_size_divisible_by × tp``);
                HF keeps ``vocab_size`` rows. Export drops the padding, import pads with zeros.
* ``qkv``       Megatron's fused ``linear_qkv`` is grouped by query group: for each of the ``g`` groups,
                ``heads/g`` query heads, then one key head, then one value head (``d`` rows each). HF
                keeps separate ``q_proj`` (heads·d rows), ``k_proj`` and ``v_proj`` (g·d rows).
* ``qkv_conv1d`` GPT-2's ``c_attn`` is ``[q; k; v]`` (all heads each, from the grouped layout above) stored
                transposed (``Conv1D``: in × out); its bias is ``[q; k; v]`` un-transposed.
* ``gate_up``   Megatron's SwiGLU ``linear_fc1`` is ``[gate; up]`` (ffn rows each, TP-independent in the
                checkpoint); HF keeps ``gate_proj`` and ``up_proj``.
* ``conv1d``    GPT-2's ``Conv1D`` weights are stored transposed (in × out) relative to ``nn.Linear``.

megatron-core names the pre-attention / pre-MLP norms ``linear_qkv.layer_norm_*`` / ``linear_fc1.layer_norm_*``
in the checkpoint for both the Transformer Engine and the local layer spec.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """The architecture facts a conversion needs, from Megatron-LM's args or an HF config."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    padded_vocab_size: int
    max_position_embeddings: int
    rope: bool
    rotary_base: float
    rmsnorm: bool
    swiglu: bool
    bias: bool
    untie: bool
    norm_epsilon: float
    num_experts: int = 0
    layernorm_1p: bool = False


@dataclass(frozen=True)
class Row:
    megatron: str
    hf: tuple[str, ...]
    kind: str = "copy"
    optional: bool = False  # biases exist only with add_bias_linear; output_layer only when untied


def _r(megatron: str, *hf: str, kind: str = "copy", optional: bool = False) -> Row:
    return Row(megatron, hf, kind, optional)


L = "decoder.layers."

LLAMA = (
    _r("embedding.word_embeddings.weight", "model.embed_tokens.weight", kind="vocab"),
    _r(L + "self_attention.linear_qkv.layer_norm_weight", "model.layers.{i}.input_layernorm.weight"),
    _r(L + "self_attention.linear_qkv.weight", "model.layers.{i}.self_attn.q_proj.weight",
       "model.layers.{i}.self_attn.k_proj.weight", "model.layers.{i}.self_attn.v_proj.weight", kind="qkv"),
    _r(L + "self_attention.linear_qkv.bias", "model.layers.{i}.self_attn.q_proj.bias",
       "model.layers.{i}.self_attn.k_proj.bias", "model.layers.{i}.self_attn.v_proj.bias", kind="qkv",
       optional=True),
    _r(L + "self_attention.linear_proj.weight", "model.layers.{i}.self_attn.o_proj.weight"),
    _r(L + "self_attention.linear_proj.bias", "model.layers.{i}.self_attn.o_proj.bias", optional=True),
    _r(L + "mlp.linear_fc1.layer_norm_weight", "model.layers.{i}.post_attention_layernorm.weight"),
    _r(L + "mlp.linear_fc1.weight", "model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight",
       kind="gate_up"),
    _r(L + "mlp.linear_fc1.bias", "model.layers.{i}.mlp.gate_proj.bias", "model.layers.{i}.mlp.up_proj.bias",
       kind="gate_up", optional=True),
    _r(L + "mlp.linear_fc2.weight", "model.layers.{i}.mlp.down_proj.weight"),
    _r(L + "mlp.linear_fc2.bias", "model.layers.{i}.mlp.down_proj.bias", optional=True),
    _r("decoder.final_layernorm.weight", "model.norm.weight"),
    _r("output_layer.weight", "lm_head.weight", kind="vocab", optional=True),
)

GPT2 = (
    _r("embedding.word_embeddings.weight", "transformer.wte.weight", kind="vocab"),
    _r("embedding.position_embeddings.weight", "transformer.wpe.weight"),
    _r(L + "self_attention.linear_qkv.layer_norm_weight", "transformer.h.{i}.ln_1.weight"),
    _r(L + "self_attention.linear_qkv.layer_norm_bias", "transformer.h.{i}.ln_1.bias"),
    _r(L + "self_attention.linear_qkv.weight", "transformer.h.{i}.attn.c_attn.weight", kind="qkv_conv1d"),
    _r(L + "self_attention.linear_qkv.bias", "transformer.h.{i}.attn.c_attn.bias", kind="qkv_conv1d"),
    _r(L + "self_attention.linear_proj.weight", "transformer.h.{i}.attn.c_proj.weight", kind="conv1d"),
    _r(L + "self_attention.linear_proj.bias", "transformer.h.{i}.attn.c_proj.bias"),
    _r(L + "mlp.linear_fc1.layer_norm_weight", "transformer.h.{i}.ln_2.weight"),
    _r(L + "mlp.linear_fc1.layer_norm_bias", "transformer.h.{i}.ln_2.bias"),
    _r(L + "mlp.linear_fc1.weight", "transformer.h.{i}.mlp.c_fc.weight", kind="conv1d"),
    _r(L + "mlp.linear_fc1.bias", "transformer.h.{i}.mlp.c_fc.bias"),
    _r(L + "mlp.linear_fc2.weight", "transformer.h.{i}.mlp.c_proj.weight", kind="conv1d"),
    _r(L + "mlp.linear_fc2.bias", "transformer.h.{i}.mlp.c_proj.bias"),
    _r("decoder.final_layernorm.weight", "transformer.ln_f.weight"),
    _r("decoder.final_layernorm.bias", "transformer.ln_f.bias"),
)

TABLES = {"LlamaForCausalLM": LLAMA, "GPT2LMHeadModel": GPT2}


# --------------------------------------------------------------------------- reshapes (one layer at a time)


def _split_qkv(t, s: Shape):
    """Grouped [g × (heads/g + 2) × d, ...] → q [heads·d, ...], k [g·d, ...], v [g·d, ...]."""
    per = s.num_attention_heads // s.num_query_groups
    d = s.kv_channels
    grouped = t.reshape(s.num_query_groups, (per + 2) * d, *t.shape[1:])
    q, k, v = grouped.split([per * d, d, d], dim=1)
    flat = lambda x: x.reshape(-1, *t.shape[1:]).contiguous()  # noqa: E731
    return flat(q), flat(k), flat(v)


def _join_qkv(q, k, v, s: Shape):
    import torch

    per = s.num_attention_heads // s.num_query_groups
    d, g = s.kv_channels, s.num_query_groups
    rest = q.shape[1:]
    grouped = torch.cat([q.reshape(g, per * d, *rest), k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)
    return grouped.reshape(-1, *rest).contiguous()


def to_hf(kind: str, t, s: Shape) -> list:
    import torch

    if kind == "copy":
        return [t.contiguous()]
    if kind == "vocab":
        return [t[: s.vocab_size].contiguous()]
    if kind == "qkv":
        return list(_split_qkv(t, s))
    if kind == "qkv_conv1d":
        fused = torch.cat(_split_qkv(t, s), dim=0)
        return [fused.t().contiguous() if fused.dim() == 2 else fused]
    if kind == "gate_up":
        return [x.contiguous() for x in t.chunk(2, dim=0)]
    if kind == "conv1d":
        return [t.t().contiguous() if t.dim() == 2 else t.contiguous()]
    raise AssertionError(kind)


def from_hf(kind: str, ts: list, s: Shape):
    import torch

    if kind == "copy":
        return ts[0].contiguous()
    if kind == "vocab":
        t = ts[0]
        pad = s.padded_vocab_size - t.shape[0]
        return torch.cat([t, t.new_zeros(pad, *t.shape[1:])]) if pad > 0 else t.contiguous()
    if kind == "qkv":
        q, k, v = ts
        return _join_qkv(q, k, v, s)
    if kind == "qkv_conv1d":
        fused = ts[0].t() if ts[0].dim() == 2 else ts[0]
        q_rows, kv_rows = s.num_attention_heads * s.kv_channels, s.num_query_groups * s.kv_channels
        q, k, v = fused.split([q_rows, kv_rows, kv_rows], dim=0)
        return _join_qkv(q, k, v, s)
    if kind == "gate_up":
        return torch.cat(ts, dim=0).contiguous()
    if kind == "conv1d":
        return ts[0].t().contiguous() if ts[0].dim() == 2 else ts[0].contiguous()
    raise AssertionError(kind)
