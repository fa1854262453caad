"""On a GPU: one attention core (forward + backward, bf16, causal) in the layout mtk's SDPA module hands torch
(views of megatron-core's ``[s, b, n, h]``) against the same made contiguous first, and with flash or cuDNN forced.

    python3 benchmarks/sdpa_layout.py      # prints ms per call for the 125m and 1.3b shapes of gpu_megatron_compare
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = {"125m": (16, 12, 1024, 64), "1.3b": (4, 16, 2048, 128)}  # micro-batch, heads, seq, head dim


def ms_per_call(fn, n: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def time_shape(b: int, h: int, s: int, d: int) -> dict[str, float]:
    q, k, v = (torch.randn(s, b, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(s, b, h * d, device="cuda", dtype=torch.bfloat16)

    def views():
        out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True)
        out.permute(2, 0, 1, 3).reshape(s, b, h * d).backward(grad)

    def contiguous():
        out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3).contiguous() for t in (q, k, v)),
                                             is_causal=True)
        out.permute(2, 0, 1, 3).reshape(s, b, h * d).backward(grad)

    res = {"views (mtk)": ms_per_call(views), "contiguous": ms_per_call(contiguous)}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel([backend]):
            res[f"views, {backend.name}"] = ms_per_call(views)
    return res


def main() -> None:
    for name, shape in SHAPES.items():
        print(name, shape, {k: round(t, 3) for k, t in time_shape(*shape).items()}, flush=True)


if __name__ == "__main__":
    main()
