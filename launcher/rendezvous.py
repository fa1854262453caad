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
    """Pick the rendezvous for this process's environment: each backend parses its own scheduler's variables, the
    highest ``rendezvous_precedence`` first (a PyTorchJob's, then Slurm's, then this machine alone)."""
    from .backends import backend_classes

    ordered = sorted(backend_classes(), key=lambda cls: -cls.rendezvous_precedence)
    for cls in ordered:
        found = cls.rendezvous(job, env)
        if found is not None:
            return found
    hints = [(cls.name, cls.environment_hint) for cls in backend_classes() if cls.environment_hint]
    raise RendezvousError(
        f"cluster.nodes is {job.cluster.nodes} but neither {' nor '.join(h for _, h in hints)} variables are set; "
        f"run through `mtk launch --backend {'|'.join(n for n, _ in hints)}`"
    )
