"""Derive torchrun's rendezvous arguments from where we are running: local, Slurm, or a Kubeflow PyTorchJob.

Pure functions of (job, environment) so every case is unit-tested without a cluster; each scheduler's variables
are parsed in its own package (``mtk.slurm.environment``, ``mtk.k8s.environment``).
"""

from __future__ import annotations

from collections.abc import Mapping
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


def int_var(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
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


def from_environment(job: Job, env: Mapping[str, str]) -> Rendezvous:
    """Pick the rendezvous for this process's environment. Kubeflow wins over Slurm wins over local."""
    procs = str(job.cluster.procs_per_node)
    from mtk.k8s.environment import rendezvous as kubeflow
    from mtk.slurm.environment import rendezvous as slurm

    for parse in (kubeflow, slurm):
        found = parse(job, env)
        if found is not None:
            return found
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
