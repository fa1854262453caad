"""Core attention through ``torch.nn.functional.scaled_dot_product_attention`` in megatron-core's ``core_attention``
slot, for GPUs without Transformer Engine.

megatron-core's local ``DotProductAttention`` materialises the ``[b·heads, s, s]`` scores (baddbmm → softmax →
bmm): on an H100 that was most of a GPT step (8.8× slower than SDPA's flash/cuDNN kernels at 125M shapes). This
module keeps its interface — query ``[sq, b, np, hn]``, key/value ``[sk, b, ng, hn]``, output
``[sq, b, np·hn]`` — and its numerics:

* causal masking by ``is_causal``; megatron's masks are True where attention is *blocked*, SDPA's boolean mask
  is True where it is *allowed*, so a mask handed in is inverted, never passed as is;
* grouped-query attention by ``enable_gqa`` (K/V are not repeated);
* the softmax scale is ``softmax_scale`` or 1/√hn. ``apply_query_key_layer_scaling`` divides the scale by the
  layer number and the softmax multiplies it back (an fp16 overflow guard): the product, used here, is the same;
* attention dropout inside megatron's CUDA RNG tracker fork, as ``DotProductAttention`` does, so tensor-parallel
  ranks draw consistent masks.

What SDPA cannot do (sliding window, a softmax other than vanilla, context parallelism) is refused here and kept
on megatron-core's module by :func:`mtk.training.device_plan.attention_choice`; packed sequences and attention
bias are refused at the call, as ``DotProductAttention`` refuses them. It holds no parameters, so its
checkpoints are ``DotProductAttention``'s.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from megatron.core import parallel_state, tensor_parallel
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import divide


class SDPAttention(MegatronModule):
    """megatron-core's core-attention interface over torch's fused SDPA kernels."""

    def __init__(self, config, layer_number: int, attn_mask_type: AttnMaskType, attention_type: str,
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None, pg_collection=None) -> None:
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError("torch SDPA core attention runs without context parallelism (cp = 1)")
        if config.window_size is not None:
            raise ValueError("torch SDPA core attention has no sliding window")
        if config.softmax_type != "vanilla":
            raise ValueError(f"torch SDPA core attention has no '{config.softmax_type}' softmax")
        tp = pg_collection.tp.size() if pg_collection is not None else \
            parallel_state.get_tensor_model_parallel_world_size()
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.heads_per_partition = divide(config.num_attention_heads, tp)
        self.groups_per_partition = divide(config.num_query_groups, tp)
        self.hidden_size_per_partition = divide(config.kv_channels * config.num_attention_heads, tp)
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(config.kv_channels)
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, attn_mask_type: AttnMaskType | None = None,
                attention_bias: torch.Tensor | None = None, packed_seq_params=None) -> torch.Tensor:
        if packed_seq_params is not None:
            raise NotImplementedError("packed sequences need Transformer Engine's attention "
                                      "(model.attention_backend: te)")
        if attention_bias is not None:
            raise NotImplementedError("attention bias is not supported by torch SDPA core attention")
        sq, b = query.shape[0], query.shape[1]
        # [s, b, n, h] -> [b, n, s, h]: views; the kernels take any stride but the last
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        allowed = None if attention_mask is None else ~attention_mask
        causal = allowed is None and mask_type == AttnMaskType.causal and sq > 1
        if causal and key.shape[0] != sq:
            raise ValueError(f"causal SDPA attention needs equal query and key lengths (got {sq} and {key.shape[0]})")
        dropout = self.dropout_p if self.training else 0.0

        def attend() -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=dropout, is_causal=causal, scale=self.softmax_scale,
                enable_gqa=self.heads_per_partition != self.groups_per_partition)

        if dropout > 0.0 and not self.config.sequence_parallel:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                context = attend()
        else:
            context = attend()
        # [b, n, s, h] -> [s, b, n·h]
        return context.permute(2, 0, 1, 3).reshape(sq, b, self.hidden_size_per_partition)
