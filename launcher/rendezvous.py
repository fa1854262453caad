"""Derive torchrun's rendezvous arguments from where we are running: local, Slurm, or a Kubeflow PyTorchJob.

Pure functions of (job, environment) so every case is unit-tested without a cluster. The one impure input,
Slurm's host list, is resolved by ``scontrol show hostnames`` when available (authoritative), else by a
small parser of Slurm's bracket syntax.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import Job


class RendezvousError(ValueError):
    """The environment does not describe a usable rendezvous; the message names the variable."""


@dataclass(frozen=True)
class Rendezvous:
    """Where this node's torchrun agent meets the others."""

    kind: str  # local | slurm | kubeflow-elastic | kubeflow-static
    args: list[str]
    node: str  # a label for logs: hostname / node rank


SLURM_PORT_BASE, SLURM_PORT_SPAN = 15000, 20000


def _int_var(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        raise RendezvousError(f"{name} is not set; it is required here")
    try:
        value = int(raw)
    except ValueError:
        raise RendezvousError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise RendezvousError(f"{name}={value} must be ≥ {minimum}")
    return value


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand Slurm's compressed host list (``node[1-3,5],gpu-[01-02]``) into host names, in order."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not match:
            hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo) if lo.startswith("0") else 0
            hosts += [f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1)]
    return hosts


def slurm_hostnames(nodelist: str) -> list[str]:
    """Hosts of the allocation, via scontrol (as Slurm itself expands them) with a parser fallback."""
    if shutil.which("scontrol"):
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    return expand_nodelist(nodelist)


def slurm_port(job: Job, env: Mapping[str, str], job_id: int) -> int:
    """Same on every node of the job and different between jobs sharing a head node."""
    if env.get("MTK_RDZV_PORT"):
        return _int_var(env, "MTK_RDZV_PORT", 1)
    if job.cluster.slurm.rdzv_port:
        return job.cluster.slurm.rdzv_port
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


def from_environment(
    job: Job, env: Mapping[str, str], hostnames: Callable[[str], list[str]] = slurm_hostnames
) -> Rendezvous:
    """Pick the rendezvous for this process's environment. Kubeflow wins over Slurm wins over local."""
    procs = str(job.cluster.procs_per_node)
    if any(key.startswith("PET_") for key in env):
        return _kubeflow(job, env, procs)
    if env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"):
        return _slurm(job, env, procs, hostnames)
    if job.cluster.nodes != 1:
        raise RendezvousError(
            f"cluster.nodes is {job.cluster.nodes} but neither Slurm (SLURM_JOB_ID, SLURM_JOB_NODELIST) nor "
            "Kubeflow (PET_*) variables are set; run through `mtk launch --backend slurm|eks`"
        )
    args = ["--standalone", "--nnodes", "1", "--nproc-per-node", procs]
    if job.cluster.local.rdzv_port:
        args = [
            "--nnodes",
            "1",
            "--nproc-per-node",
            procs,
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(job.cluster.local.rdzv_port),
        ]
    return Rendezvous("local", args, "local")


def _slurm(job: Job, env: Mapping[str, str], procs: str, hostnames) -> Rendezvous:
    job_id = _int_var(env, "SLURM_JOB_ID", 1)
    nnodes = _int_var(env, "SLURM_NNODES", 1)
    node_id = _int_var(env, "SLURM_NODEID", 0)
    if node_id >= nnodes:
        raise RendezvousError(f"SLURM_NODEID={node_id} is not below SLURM_NNODES={nnodes}")
    # A step on part of the allocation (spare nodes: the healthy ones) has its own list; node ids follow it.
    list_var = "SLURM_STEP_NODELIST" if env.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = hostnames(env[list_var])
    if len(hosts) != nnodes:
        raise RendezvousError(
            f"{list_var}={env[list_var]!r} expands to {len(hosts)} hosts but SLURM_NNODES={nnodes}"
        )
    if nnodes not in job.cluster.node_counts:
        wanted = (f"cluster.nodes={job.cluster.nodes}" if job.cluster.min_nodes is None
                  else f"the spare-node range cluster.nodes={job.cluster.min_nodes}:{job.cluster.nodes}")
        raise RendezvousError(
            f"SLURM_NNODES={nnodes} differs from {wanted}; submit with `mtk launch` so the allocation matches the spec"
        )
    endpoint = f"{hosts[0]}:{slurm_port(job, env, job_id)}"
    # A requeued job keeps its id; a fresh rendezvous id per restart keeps stale agents out.
    rdzv_id = f"{job_id}-{env.get('SLURM_RESTART_COUNT', '0')}"
    args = [
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        procs,
        "--node-rank",
        str(node_id),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        rdzv_id,
        "--max-restarts",
        "0",
    ]
    return Rendezvous("slurm", args, env.get("SLURMD_NODENAME") or hosts[node_id])


def _kubeflow(job: Job, env: Mapping[str, str], procs: str) -> Rendezvous:
    """What the Kubeflow training operator (v1.9) injects, elastic (etcd) or static (master address)."""
    nproc = env.get("PET_NPROC_PER_NODE") or procs
    node = env.get("HOSTNAME", "pod")
    if env.get("PET_RDZV_BACKEND") or env.get("PET_RDZV_ENDPOINT"):
        backend = env.get("PET_RDZV_BACKEND")
        endpoint = env.get("PET_RDZV_ENDPOINT")
        if not backend:
            raise RendezvousError("PET_RDZV_ENDPOINT is set but PET_RDZV_BACKEND is not")
        if not endpoint or ":" not in endpoint:
            raise RendezvousError(f"PET_RDZV_ENDPOINT={endpoint!r} must be HOST:PORT")
        nnodes = env.get("PET_NNODES")
        if not nnodes or not re.fullmatch(r"\d+(:\d+)?", nnodes):
            raise RendezvousError(f"PET_NNODES={nnodes!r} must be N or MIN:MAX")
        args = [
            "--nnodes",
            nnodes,
            "--nproc-per-node",
            nproc,
            "--rdzv-backend",
            backend,
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            env.get("PET_RDZV_ID") or job.name,
            "--max-restarts",
            env.get("PET_MAX_RESTARTS") or str(job.cluster.eks.max_restarts),
        ]
        if env.get("PET_RDZV_CONF"):
            args += ["--rdzv-conf", env["PET_RDZV_CONF"]]
        return Rendezvous("kubeflow-elastic", args, node)
    nnodes = str(_int_var(env, "PET_NNODES", 1))
    rank = _int_var(env, "PET_NODE_RANK", 0)
    addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
    if not addr:
        raise RendezvousError("PET_MASTER_ADDR is not set (static PyTorchJob without elasticPolicy)")
    port = _int_var(env, "PET_MASTER_PORT" if env.get("PET_MASTER_PORT") else "MASTER_PORT", 1)
    args = [
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        nproc,
        "--node-rank",
        str(rank),
        "--master-addr",
        addr,
        "--master-port",
        str(port),
    ]
    return Rendezvous("kubeflow-static", args, node)
