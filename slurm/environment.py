"""Slurm's environment on a node: the allocation's host list, torchrun's rendezvous and the node's place in the
job from ``SLURM_*``; whether a job is still in Slurm's queue.

Pure functions of (job, environment), so every case is unit-tested without a cluster. The one impure input,
the host list, is resolved by ``scontrol show hostnames`` when available (authoritative), else by a small
parser of Slurm's bracket syntax.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mtk.rendezvous import NodePlace, Rendezvous, RendezvousError, digits, index_var, int_var

if TYPE_CHECKING:
    from mtk.spec import Job

SLURM_PORT_BASE, SLURM_PORT_SPAN = 15000, 20000


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
        return int_var(env, "MTK_RDZV_PORT", 1)
    if job.cluster.slurm.rdzv_port:
        return job.cluster.slurm.rdzv_port
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


def rendezvous(job: Job, env: Mapping[str, str]) -> Rendezvous | None:
    """torchrun's arguments inside a Slurm allocation; None outside one."""
    if not (env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST")):
        return None
    procs = str(job.cluster.procs_per_node)
    job_id = int_var(env, "SLURM_JOB_ID", 1)
    nnodes = int_var(env, "SLURM_NNODES", 1)
    node_id = int_var(env, "SLURM_NODEID", 0)
    if node_id >= nnodes:
        raise RendezvousError(f"SLURM_NODEID={node_id} is not below SLURM_NNODES={nnodes}")
    # A step on part of the allocation (spare nodes: the healthy ones) has its own list; node ids follow it.
    list_var = "SLURM_STEP_NODELIST" if env.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = slurm_hostnames(env[list_var])  # looked up at call time: tests put the parser here
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
    # Slurm numbers the nodes, so torch's static rendezvous: node 0's agent hosts the store, every other agent
    # connects once — linear in N, where the dynamic (c10d) join rewrites one shared state per arrival (N^2.3
    # through the store; benchmarks/scale_rendezvous.py measures both, docs/scale.md).
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
        "static",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        rdzv_id,
        "--max-restarts",
        "0",
    ]
    return Rendezvous("slurm", args, env.get("SLURMD_NODENAME") or hosts[node_id])


def node_place(env: Mapping[str, str]) -> NodePlace | None:
    """Job id, node id and count, requeue count and array index from a Slurm job's variables; None outside one."""
    if not any(key.startswith("SLURM_") for key in env):
        return None
    return NodePlace(job_id=env.get("SLURM_JOB_ID", ""), node_rank=digits(env, "SLURM_NODEID"),
                     nnodes=digits(env, "SLURM_NNODES"), restarts=digits(env, "SLURM_RESTART_COUNT") or 0,
                     task_index=index_var(env, "SLURM_ARRAY_TASK_ID"))


def job_ended(job_id: str) -> bool:
    """True when Slurm says the job is no longer queued or running (False when it cannot tell)."""
    if not job_id.isdigit() or shutil.which("squeue") is None:
        return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return (out.returncode == 0 and not out.stdout.strip()) or "Invalid job id" in out.stderr
