"""``debug``: switches that help find hangs and slow steps; all off by default."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class ProfileSpec(Section):
    """An iteration window and the global ranks to profile."""

    enabled: bool = False
    start: int = Field(5, ge=0, description="First profiled iteration.")
    stop: int = Field(7, ge=1, description="Iteration after the last profiled one.")
    ranks: list[int] = Field(default_factory=lambda: [0])


class DebugSpec(Section):
    """NCCL logs per rank, Nsight Systems or torch.profiler windows, and an environment dump."""

    nccl_debug: bool = Field(False, description="NCCL_DEBUG=INFO with one file per host/rank in the run dir.")
    nccl_flight_recorder: bool = Field(False, description="Dump NCCL flight-recorder traces on timeout.")
    nsys: ProfileSpec = Field(default_factory=ProfileSpec, description="Wrap chosen ranks in `nsys profile`.")
    torch_profiler: ProfileSpec = Field(default_factory=ProfileSpec)
    env_dump: bool = Field(True, description="Write versions, env and topology to the run dir at start.")
