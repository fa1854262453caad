"""NCCL/EFA/torch environment presets per instance type, shared by the Slurm and EKS renderers.

Returned as an ordered dict; the job's ``cluster.env`` is applied last so users can override any preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import Job


@dataclass(frozen=True)
class InstanceProfile:
    gpus: int
    efa: int
    gpudirect_rdma: bool
    hopper_or_older: bool = True  # CUDA_DEVICE_MAX_CONNECTIONS=1 only helps (and is only required) here


INSTANCES: dict[str, InstanceProfile] = {
    "p4d.24xlarge": InstanceProfile(gpus=8, efa=4, gpudirect_rdma=True),
    "p4de.24xlarge": InstanceProfile(gpus=8, efa=4, gpudirect_rdma=True),
    "p5.48xlarge": InstanceProfile(gpus=8, efa=32, gpudirect_rdma=True),
    "p5e.48xlarge": InstanceProfile(gpus=8, efa=32, gpudirect_rdma=True),
    "p5en.48xlarge": InstanceProfile(gpus=8, efa=16, gpudirect_rdma=True),
    "p6-b200.48xlarge": InstanceProfile(gpus=8, efa=8, gpudirect_rdma=True, hopper_or_older=False),
    "g5.48xlarge": InstanceProfile(gpus=8, efa=1, gpudirect_rdma=False),
    "g6e.48xlarge": InstanceProfile(gpus=8, efa=4, gpudirect_rdma=False),
}

# Interfaces NCCL must never pick for inter-node traffic (loopback, container bridges, veth pairs).
SOCKET_IFNAME_EXCLUDE = "^lo,docker,veth"


def efa_count(job: Job) -> int:
    """EFA devices per node: explicit ``cluster.efa_per_node``, else from the instance type, else 0."""
    c = job.cluster
    if c.efa_per_node is not None:
        return c.efa_per_node
    profile = INSTANCES.get(c.instance_type or "")
    return profile.efa if profile else 0


def network_env(job: Job, run_dir: str | None = None) -> dict[str, str]:
    """The environment every training process gets (before ``cluster.env`` overrides)."""
    c, p = job.cluster, job.parallel
    env: dict[str, str] = {}
    if c.device == "gpu":
        env["NCCL_SOCKET_IFNAME"] = SOCKET_IFNAME_EXCLUDE
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
        profile = INSTANCES.get(c.instance_type or "")
        if efa_count(job) > 0:
            # Exported, not just set: the AWS sample set FI_PROVIDER without exporting it, and NCCL fell
            # back to TCP sockets (~23% slower) without a word.
            env["FI_PROVIDER"] = "efa"
            env["FI_EFA_FORK_SAFE"] = "1"
            if profile is None or profile.gpudirect_rdma:
                env["FI_EFA_USE_DEVICE_RDMA"] = "1"
            # Fail loudly if the OFI plugin is missing instead of quietly using TCP sockets. "AWS Libfabric" is
            # the name aws-ofi-nccl <= 1.11 reports and newer releases still accept (they report "Libfabric").
            env["NCCL_NET"] = "AWS Libfabric"
        hopper = profile.hopper_or_older if profile else True
        if hopper and (p.tp > 1 or p.cp > 1 or p.sequence_parallel):
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if job.debug.nccl_debug and run_dir:
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,ENV"
        env["NCCL_DEBUG_FILE"] = f"{run_dir}/debug/nccl.%h.%p.log"
    if job.debug.nccl_flight_recorder and run_dir:
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = f"{run_dir}/debug/nccl_trace_rank_"
    env.update(c.env)
    return env
