"""``parallel``: how the model is split across GPUs (Megatron-Core terms)."""

from pydantic import Field

from .base import Section


class ParallelSpec(Section):
    """Tensor/pipeline/context/expert parallel sizes; data parallel is whatever GPUs remain."""

    tp: int = Field(1, ge=1, description="Tensor model parallel size.")
    pp: int = Field(1, ge=1, description="Pipeline model parallel size.")
    cp: int = Field(1, ge=1, description="Context parallel size.")
    ep: int = Field(1, ge=1, description="Expert parallel size (MoE only).")
    sequence_parallel: bool = Field(False, description="Shard LayerNorm/dropout activations over tp (needs tp > 1).")
    distributed_optimizer: bool = Field(False, description="Shard optimizer state over data parallel ranks (ZeRO-1).")
    virtual_pp: int | None = Field(None, ge=1, description="Interleaved pipeline stages per rank.")
