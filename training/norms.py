"""A torch LayerNorm/RMSNorm for megatron-core's local spec where its own torch fallback refuses the job.

megatron.core's ``WrappedTorchNorm`` (no Apex/TE) refuses two settings this norm honours:

* sequence parallelism: each TP rank normalises a different slice of the sequence, so the norm's weight
  gradients must be summed over the TP group. megatron's ``finalize_model_grads`` does exactly that for every
  parameter with ``sequence_parallel = True``; this norm sets the flag.
* zero-centred gamma (``model.layernorm_1p``, Megatron-LM's ``--apply-layernorm-1p``): the weight is stored as
  ``γ - 1``, initialised to 0, and the norm scales by ``1 + weight`` — what TE's and Apex's norms do with
  ``layernorm_zero_centered_gamma``, so checkpoints mean the same on every spec.
"""

from __future__ import annotations

from typing import Any


def TorchNorm(config: Any, hidden_size: int, eps: float = 1e-5, **_unused: Any):
    """Same constructor as ``WrappedTorchNorm``: the norm module for ``config``."""
    import torch
    import torch.nn.functional as F

    if config.normalization not in ("LayerNorm", "RMSNorm"):
        raise ValueError(f"model.normalization={config.normalization!r}: only LayerNorm and RMSNorm")
    rms = config.normalization == "RMSNorm"
    if config.layernorm_zero_centered_gamma:

        class _ZeroCentred(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.weight = torch.nn.Parameter(torch.zeros(hidden_size))
                self.bias = None if rms else torch.nn.Parameter(torch.zeros(hidden_size))

            def forward(self, x):
                if rms:
                    return F.rms_norm(x, (hidden_size,), self.weight + 1, eps)
                return F.layer_norm(x, (hidden_size,), self.weight + 1, self.bias, eps)

        norm: torch.nn.Module = _ZeroCentred()
    else:
        norm = torch.nn.RMSNorm(hidden_size, eps=eps) if rms else torch.nn.LayerNorm(hidden_size, eps=eps)
    for p in norm.parameters():
        p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]  # megatron-core reads it
    return norm
