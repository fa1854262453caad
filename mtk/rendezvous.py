"""Where this node runs: torchrun's rendezvous arguments, and the node's place in its scheduler's job.

Pure functions of (job, environment) so every case is unit-tested without a cluster; each scheduler's variables
are parsed in its own package (``mtk.slurm.environment``, ``mtk.k8s.environment``) behind its backend's
``rendezvous`` and ``node_place``. The node-side steps (preflight, checkpoint precheck, train step, the engine's
lease and metrics, sharded preprocess) ask :func:`node_place` and never read a scheduler's variables themselves.
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


@dataclass(frozen=True)
class NodePlace:
    """This process's place in its scheduler's job, as the node-side steps need it (all unknown outside one)."""

    job_id: str = ""  # the scheduler's name for the job or pod ("" when none)
    node_rank: int | None = None  # this node's rank when the scheduler numbers nodes before any rendezvous
    nnodes: int | None = None  # nodes in this job step, when the scheduler says
    restarts: int = 0  # times the scheduler requeued or restarted this job
    task_index: int | None = None  # an array task's (Indexed Job's) index
    # The scheduler restarts this node's container when it exits non-zero (a PyTorchJob's restartPolicy
    # OnFailure): a deliberate stop must exit 0 there, and a hang's blame travels in the run's state.
    restarts_failed_containers: bool = False


def _by_precedence() -> list:
    """The registered backends, the one whose environment wins when several match first."""
    from .backends import backend_classes

    return sorted(backend_classes(), key=lambda cls: -cls.rendezvous_precedence)


def node_place(env: Mapping[str, str]) -> NodePlace:
    """The first backend (highest ``rendezvous_precedence``) that recognises ``env`` says where this node is."""
    for cls in _by_precedence():
        place = cls.node_place(env)
        if place is not None:
            return place
    return NodePlace()


def digits(env: Mapping[str, str], name: str) -> int | None:
    """``env[name]`` as a non-negative integer, None when unset or not one (a lenient read)."""
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else None


def index_var(env: Mapping[str, str], name: str) -> int | None:
    """A task index from ``env[name]``: None when unset; a ValueError naming the variable when not an index."""
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"{name}={value!r} is not a task index")
    return int(value)


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

    for cls in _by_precedence():
        found = cls.rendezvous(job, env)
        if found is not None:
            return found
    hints = [(cls.name, cls.environment_hint) for cls in backend_classes() if cls.environment_hint]
    raise RendezvousError(
        f"cluster.nodes is {job.cluster.nodes} but neither {' nor '.join(h for _, h in hints)} variables are set; "
        f"run through `mtk launch --backend {'|'.join(n for n, _ in hints)}`"
    )
