"""NCCL/EFA/torch environment presets per instance type, shared by the Slurm, EKS and local renderers.

Every value carries the reason it is set (``Setting.source``): ``mtk validate`` prints them and the README's
per-instance table is checked against them. The job's ``cluster.env`` is applied last, so any preset can be
overridden. AWS's references are from ``aws-samples/awsome-distributed-training`` (read 2026-11, commit 7217859):
``micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch`` (the nccl-tests tuning),
``3.test_cases/megatron/megatron-lm/slurm/llama2/pretrain-llama2.sbatch`` (the Megatron-LM H100 settings),
``1.architectures/efa-cheatsheet.md`` (what each EFA variable does) and
``4.validation_and_observability/2.gpu-cluster-healthcheck/instance-profiles.conf`` (GPU/EFA counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec.job import Job

AWS = "aws-samples/awsome-distributed-training"
SRC_NCCL_TESTS = f"{AWS} micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch"
SRC_LLAMA2 = f"{AWS} 3.test_cases/megatron/megatron-lm/slurm/llama2/pretrain-llama2.sbatch"
SRC_CHEATSHEET = f"{AWS} 1.architectures/efa-cheatsheet.md"
# Where aws-ofi-nccl (EFA installer >= 1.36, and mtk's image, which links it there when the plugin lives
# elsewhere) puts the algorithm/protocol tuner; every instance type below is x86_64.
TUNER_PLUGIN = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so"


@dataclass(frozen=True)
class Setting:
    """One environment variable mtk sets, and why."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class InstanceProfile:
    gpus: int
    efa: int
    gpudirect_rdma: bool
    hopper_or_older: bool = True  # CUDA_DEVICE_MAX_CONNECTIONS=1 only helps (and is only required) here
    # AWS's nccl-tests tuning (buffer size, P2P chunk size, the OFI tuner): its sbatch sets it whatever the p4d/p5
    # instance type; mtk applies it to the EFA GPU instances with GPUDirect RDMA (p4d/p4de/p5/p5e/p5en/p6-b200), not
    # to g5/g6e, for which AWS publishes no such tuning.
    aws_nccl_tuning: bool = False
    # NVLink SHARP exists on H100/H200 NVSwitch systems only (p5 family); AWS's Megatron-LM H100 sbatch turns it
    # off (NCCL's NVLS buffers cost GPU memory and need the fabric's multicast support).
    nvls: bool = False
    # Floor for mtk's cross-node preflight all-reduce (one rank per node on GPU 0, allreduce_mb = 64 MB), in
    # GB/s of bus bandwidth. Not AWS's nccl-tests floors (those time 8 GPUs per node up to 16 GB messages and do
    # not apply to this probe): a quarter of the EFA bandwidth one GPU can reach (the NICs on its PCIe switch),
    # from the instance's published network bandwidth — low enough that a healthy node never trips it, high
    # enough that NCCL on TCP sockets (a missing/broken EFA, ~1-3 GB/s) or a dead NIC does.
    min_busbw_gbps: float | None = None
    busbw_why: str = ""


INSTANCES: dict[str, InstanceProfile] = {
    "p4d.24xlarge": InstanceProfile(gpus=8, efa=4, gpudirect_rdma=True, aws_nccl_tuning=True, min_busbw_gbps=3.0,
                                    busbw_why="4 x 100 Gbps EFA for 8 A100: 1 NIC (12.5 GB/s) per GPU pair; 25%"),
    "p4de.24xlarge": InstanceProfile(gpus=8, efa=4, gpudirect_rdma=True, aws_nccl_tuning=True, min_busbw_gbps=3.0,
                                     busbw_why="as p4d.24xlarge: 4 x 100 Gbps EFA; 25% of 12.5 GB/s"),
    "p5.48xlarge": InstanceProfile(gpus=8, efa=32, gpudirect_rdma=True, aws_nccl_tuning=True, nvls=True,
                                   min_busbw_gbps=12.0,
                                   busbw_why="3200 Gbps EFA / 8 H100 = 400 Gbps (50 GB/s) per GPU; 25%"),
    "p5e.48xlarge": InstanceProfile(gpus=8, efa=32, gpudirect_rdma=True, aws_nccl_tuning=True, nvls=True,
                                    min_busbw_gbps=12.0,
                                    busbw_why="3200 Gbps EFA / 8 H200 = 50 GB/s per GPU; 25%"),
    "p5en.48xlarge": InstanceProfile(gpus=8, efa=16, gpudirect_rdma=True, aws_nccl_tuning=True, nvls=True,
                                     min_busbw_gbps=12.0,
                                     busbw_why="16 x 200 Gbps EFAv3 / 8 H200 = 50 GB/s per GPU; 25%"),
    "p6-b200.48xlarge": InstanceProfile(gpus=8, efa=8, gpudirect_rdma=True, hopper_or_older=False,
                                        aws_nccl_tuning=True, min_busbw_gbps=12.0,
                                        busbw_why="8 x 400 Gbps EFAv4, one per B200 = 50 GB/s; 25%"),
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


def profile_of(job: Job) -> InstanceProfile | None:
    return INSTANCES.get(job.cluster.instance_type or "")


def workers_fork(job: Job) -> bool:
    """DataLoader worker processes fork from a rank that may hold EFA registrations."""
    return job.data.num_workers > 0


def preset(job: Job) -> list[Setting]:
    """What mtk sets for this job's device, instance type, parallelism and data loading (before ``cluster.env``)."""
    c, p = job.cluster, job.parallel
    if c.device != "gpu":
        return []
    out = [Setting("NCCL_SOCKET_IFNAME", SOCKET_IFNAME_EXCLUDE,
                   "bootstrap/socket traffic never on loopback, docker bridges or veth pairs (AWS's image excludes "
                   f"the same: {AWS} micro-benchmarks/nccl-tests/nccl-tests.Dockerfile)"),
           Setting("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1",
                   "a failed or timed-out NCCL collective tears the process down instead of hanging, so the "
                   f"restart logic can act ({SRC_LLAMA2} sets its older name NCCL_ASYNC_ERROR_HANDLING=1)")]
    profile = profile_of(job)
    if efa_count(job) > 0:
        out += [Setting("FI_PROVIDER", "efa", f"libfabric uses EFA, exported ({SRC_NCCL_TESTS}); AWS's Megatron "
                        "sample once set it without export and NCCL fell back to TCP (~23% slower)"),
                Setting("FI_EFA_FORK_SAFE", "1", f"fork-safe EFA on kernels < 5.15, a no-op after ({SRC_CHEATSHEET})")]
        if profile is None or profile.gpudirect_rdma:
            out.append(Setting("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA on p4/p5; needed by libfabric < 1.18 "
                               f"and harmless after ({SRC_CHEATSHEET})"))
        out.append(Setting("NCCL_NET", "AWS Libfabric", "fail loudly when the OFI plugin is missing instead of "
                           "quietly using TCP sockets; the name aws-ofi-nccl <= 1.11 reports, still accepted"))
        if workers_fork(job):
            out.append(Setting("FI_EFA_USE_HUGE_PAGE", "0", "data.num_workers > 0: DataLoader workers fork, and "
                               "huge-page EFA buffers make os.fork() fail with 'Cannot allocate memory' "
                               f"({SRC_CHEATSHEET})"))
        if profile is not None and profile.aws_nccl_tuning:
            out += [Setting("NCCL_BUFFSIZE", "8388608", "8 MiB buffers: deeper send queue, non-blocking EFA "
                            f"communication ({SRC_NCCL_TESTS})"),
                    Setting("NCCL_P2P_NET_CHUNKSIZE", "524288", "512 KiB chunks for send/recv (pipeline "
                            f"parallelism) over the network ({SRC_NCCL_TESTS})"),
                    Setting("NCCL_TUNER_PLUGIN", TUNER_PLUGIN, "aws-ofi-nccl's algorithm/protocol tuner for AWS "
                            f"topologies ({SRC_NCCL_TESTS}; the path is x86_64's)")]
    if profile is not None and profile.nvls:
        out.append(Setting("NCCL_NVLS_ENABLE", "0", f"NVLink SHARP off on H100/H200 nodes ({SRC_LLAMA2})"))
    out.append(Setting("TORCH_NCCL_AVOID_RECORD_STREAMS", "1", "frees NCCL's tensors when the collective ends "
                       f"instead of when the caching allocator notices: less memory held ({SRC_LLAMA2})"))
    hopper = profile.hopper_or_older if profile else True
    if hopper and (p.tp > 1 or p.cp > 1 or p.sequence_parallel):
        out.append(Setting("CUDA_DEVICE_MAX_CONNECTIONS", "1", "TP/CP/SP communication overlap needs kernels "
                           f"issued in order on Hopper and older (megatron-core; {SRC_LLAMA2})"))
    return out


def network_env(job: Job, run_dir: str | None = None) -> dict[str, str]:
    """The environment every training process gets: the preset, debug switches, then ``cluster.env``."""
    env = {s.name: s.value for s in preset(job)}
    if job.debug.nccl_debug and run_dir:
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,ENV"
        env["NCCL_DEBUG_FILE"] = f"{run_dir}/debug/nccl.%h.%p.log"
    if job.debug.nccl_flight_recorder and run_dir:
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = f"{run_dir}/debug/nccl_trace_rank_"
    env.update(job.cluster.env)
    return env


def min_busbw_gbps(job: Job) -> tuple[float | None, str]:
    """The preflight's bus-bandwidth floor and where it comes from: the spec, else the instance type's preset."""
    floor = job.resilience.preflight.min_busbw_gbps
    if floor is not None:
        return floor, "resilience.preflight.min_busbw_gbps"
    profile = profile_of(job)
    if job.cluster.device == "gpu" and profile is not None and profile.min_busbw_gbps is not None:
        return profile.min_busbw_gbps, f"{job.cluster.instance_type} preset ({profile.busbw_why})"
    return None, "none (set resilience.preflight.min_busbw_gbps)"


def describe(job: Job) -> list[str]:
    """``mtk validate``'s account of the preset: each variable, where ``cluster.env`` overrides it, and why."""
    c = job.cluster
    if c.device != "gpu":
        return ["network preset: none (cluster.device is cpu)"]
    name = c.instance_type if profile_of(job) else f"generic GPU ({c.instance_type or 'no instance_type'})"
    lines = [f"network preset: {name}, {efa_count(job)} EFA per node"]
    for s in preset(job):
        if s.name in c.env:
            lines.append(f"  {s.name}={c.env[s.name]}  (cluster.env overrides the preset's {s.value!r})")
        else:
            lines.append(f"  {s.name}={s.value}  ({s.source})")
    for k, v in c.env.items():
        if k not in {s.name for s in preset(job)}:
            lines.append(f"  {k}={v}  (cluster.env)")
    floor, why = min_busbw_gbps(job)
    lines.append(f"preflight all-reduce floor: {floor if floor is not None else 'none'} GB/s ({why})"
                 if floor is not None else f"preflight all-reduce floor: {why}")
    return lines
