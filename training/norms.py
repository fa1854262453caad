"""A torch LayerNorm/RMSNorm that works with sequence parallelism (CPU, no Apex/TE).

megatron.core's fallback ``WrappedTorchNorm`` refuses sequence parallelism because its weights would not
be marked: with SP each TP rank normalises a different slice of the sequence, so the norm's weight
gradients must be summed over the TP group. megatron's ``finalize_model_grads`` does exactly that for
every parameter with ``sequence_parallel = True``; this norm sets the flag.
"""

from __future__ import annotations

from typing import Any


class SequenceParallelTorchNorm:
    """Same constructor as ``WrappedTorchNorm``; returns a torch norm whose params carry the SP flag."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **_unused: Any):
        import torch

        if config.normalization == "RMSNorm":
            norm: torch.nn.Module = torch.nn.RMSNorm(hidden_size, eps=eps)
        elif config.normalization == "LayerNorm":
            norm = torch.nn.LayerNorm(hidden_size, eps=eps)
        else:
            raise ValueError(f"model.normalization={config.normalization!r}: only LayerNorm and RMSNorm")
        for p in norm.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]  # megatron-core reads it
        return norm
