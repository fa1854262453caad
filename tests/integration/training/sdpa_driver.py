"""One torchrun rank: mtk's SDPA core attention against megatron-core's DotProductAttention on the same inputs.

    torchrun --standalone --nproc-per-node N sdpa_driver.py OUT_DIR

Tensor parallel over all N ranks (gloo, CPU, fp32). Each rank builds both modules for its share of the heads, feeds
both the same query/key/value (drawn for all heads from one seed, then sliced like the QKV projection's output)
and the same output gradient, and records per case the largest absolute difference of the output and of the
query/key/value gradients, with the largest magnitude for scale, in ``OUT_DIR/rank<N>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# name: (heads, query groups, explicit mask, layer number, apply_query_key_layer_scaling, softmax_scale)
CASES = {
    "causal": (8, 8, False, 1, False, None),
    "causal_gqa": (8, 2, False, 1, False, None),
    "explicit_mask_gqa": (8, 4, True, 1, False, None),
    "layer_scaling": (8, 8, False, 3, True, None),
    "softmax_scale": (8, 2, False, 1, False, 0.3),
}
SEQ, BATCH, HEAD_DIM = 16, 3, 8


def main(out_dir: str) -> None:
    from mtk.training import compat

    compat.install()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig
    from mtk.training.sdpa_attention import SDPAttention

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ps.initialize_model_parallel(tensor_model_parallel_size=world)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    results = {}
    for name, (heads, groups, masked, layer, scaling, scale) in CASES.items():
        config = TransformerConfig(num_layers=4, hidden_size=heads * HEAD_DIM, num_attention_heads=heads,
                                   num_query_groups=groups, tensor_model_parallel_size=world,
                                   use_cpu_initialization=True, attention_dropout=0.0, hidden_dropout=0.0,
                                   apply_query_key_layer_scaling=scaling, masked_softmax_fusion=False,
                                   attention_softmax_in_fp32=True)
        gen = torch.Generator().manual_seed(7)
        q_all = torch.randn(SEQ, BATCH, heads, HEAD_DIM, generator=gen)
        k_all = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
        v_all = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
        grad_all = torch.randn(SEQ, BATCH, heads * HEAD_DIM, generator=gen)
        hp, gp = heads // world, groups // world
        mask = None
        if masked:  # causal plus a few blocked keys per batch row; True = blocked, as megatron's masks
            mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1).expand(BATCH, 1, SEQ, SEQ).clone()
            mask[1, :, 1:, 0] = True  # never a whole row: megatron fills those with -10000, SDPA with 0
            mask[2, :, 5:, 3:5] = True
        inputs = (q_all[:, :, rank * hp:(rank + 1) * hp], k_all[:, :, rank * gp:(rank + 1) * gp],
                  v_all[:, :, rank * gp:(rank + 1) * gp])
        grad = grad_all.view(SEQ, BATCH, heads, HEAD_DIM)[:, :, rank * hp:(rank + 1) * hp].reshape(SEQ, BATCH, -1)
        outs = {}
        for label, cls in (("sdpa", SDPAttention), ("dot", DotProductAttention)):
            module = cls(config=config, layer_number=layer, attn_mask_type=AttnMaskType.causal,
                         attention_type="self", softmax_scale=scale)
            q, k, v = (t.clone().requires_grad_(True) for t in inputs)
            out = module(q, k, v, mask)
            out.backward(grad)
            outs[label] = [out.detach(), q.grad, k.grad, v.grad]
        diffs = [float((a - b).abs().max()) for a, b in zip(outs["sdpa"], outs["dot"], strict=True)]
        results[name] = {"diff": dict(zip(("out", "dq", "dk", "dv"), diffs, strict=True)),
                         "magnitude": float(max(t.abs().max() for t in outs["dot"])),
                         "shape": list(outs["sdpa"][0].shape)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
