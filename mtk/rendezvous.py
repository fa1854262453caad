"""Where this node runs: torchrun's rendezvous arguments, and the node's place in its scheduler's job.

Pure functions of (job, environment) so every case is unit-tested without a cluster. Each scheduler's variables
are parsed in a small module of its own backend's package (``mtk.slurm.environment``, ``mtk.k8s.environment``),
named with the variables that mark its processes by a :class:`Scheduler` in ``mtk.backends``: a node imports the
one module its environment names and no backend (a training node under Slurm never loads the Kubernetes backend,
nor the Slurm backend's renderer). The node-side steps (preflight, checkpoint precheck, train step, the engine's
lease and metrics, sharded preprocess) ask :func:`node_place` and never read a scheduler's variables themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from .exitcodes import BadInput

if TYPE_CHECKING:
    from .backends import Scheduler
    from .spec.job import Job


class RendezvousError(BadInput, ValueError):
    """The environment does not describe a usable rendezvous; the message names the variable (exit 2)."""


# c10d joins staggered by node index (``mtk.launcher.staggered_rendezvous``): torch's c10d rendezvous keeps every
# participant in one key each join compare-and-sets, and a thousand agents joining at once never complete
# (benchmarks/scale_rendezvous.py). A rendezvous conf naming JOIN_STAGGER_KEY (seconds per index) asks every node
# to wait ``index x stagger`` before each round; the node's index comes from REPLICA_INDEX_VAR (a PyTorchJob pod:
# the training operator's replica-index label, through the downward API) and travels as JOIN_INDEX_KEY.
STAGGERED_C10D = "mtk-c10d"  # the torchrun backend name mtk registers for it (torch's c10d inside)
JOIN_STAGGER_KEY = "mtk_join_stagger"
JOIN_INDEX_KEY = "mtk_join_index"
REPLICA_INDEX_VAR = "MTK_REPLICA_INDEX"


def parse_rdzv_conf(conf: str, name: str) -> dict[str, str]:
    """torchrun's ``--rdzv-conf`` text (``key=value,...``) as a dict; ``name`` (where it came from) in the error."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in conf.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RendezvousError(f"{name}={conf!r}: {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def staggered_c10d(backend: str, conf: str, env: Mapping[str, str], name: str) -> tuple[str, str]:
    """(torchrun backend, rendezvous conf) for this node: a c10d rendezvous whose conf (``name``, e.g.
    PET_RDZV_CONF) asks for a join stagger becomes mtk's staggered c10d with this node's index added; any other
    is returned as it is."""
    parsed = parse_rdzv_conf(conf, name)
    if JOIN_STAGGER_KEY not in parsed:
        return backend, conf
    if backend != "c10d":
        raise RendezvousError(f"{name} sets {JOIN_STAGGER_KEY}, which only a c10d rendezvous honours (the backend "
                              f"is {backend!r}): remove it")
    try:
        stagger = float(parsed[JOIN_STAGGER_KEY])
    except ValueError:
        stagger = -1.0
    if not 0.0 <= stagger <= 10.0:
        raise RendezvousError(f"{name}: {JOIN_STAGGER_KEY}={parsed[JOIN_STAGGER_KEY]!r} must be seconds per node "
                              "index, 0 to 10")
    index = env.get(REPLICA_INDEX_VAR, "").strip()
    if not index.isdigit():
        raise RendezvousError(f"{name} staggers each node's join by its index, but {REPLICA_INDEX_VAR}={index!r} is "
                              "not one: the rendered pod sets it from the training operator's replica-index label")
    return STAGGERED_C10D, ",".join([*(f"{k}={v}" for k, v in parsed.items() if k != JOIN_INDEX_KEY),
                                     f"{JOIN_INDEX_KEY}={int(index)}"])


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


def _schedulers_here(env: Mapping[str, str]) -> Iterator[tuple[Scheduler, ModuleType]]:
    """The schedulers whose variables ``env`` carries, highest precedence first, each with its reader module
    (imported only when its variables are present)."""
    from .backends import schedulers

    for scheduler in sorted(schedulers(), key=lambda s: -s.precedence):
        if scheduler.marks(env):
            yield scheduler, scheduler.reader()


def scheduler_here(env: Mapping[str, str]) -> str:
    """The backend whose scheduler started this process ("" outside every scheduler): what a lease records so that
    whoever meets it later asks that scheduler, and only it, whether the holder's job is still there."""
    return next((s.backend for s, reader in _schedulers_here(env) if reader.node_place(env) is not None), "")


def node_place(env: Mapping[str, str]) -> NodePlace:
    """The first scheduler (highest precedence) that recognises ``env`` says where this node is."""
    for _, reader in _schedulers_here(env):
        place = reader.node_place(env)
        if place is not None:
            return place
    return NodePlace()


def job_ended(job_id: str, scheduler: str | None) -> bool:
    """True when ``scheduler`` (a backend name; None: unknown, every one that can tell is asked) says ``job_id``
    is no longer queued or running; False when it cannot tell."""
    from .backends import schedulers

    if not job_id:
        return False
    for candidate in schedulers():
        if scheduler is not None and candidate.backend != scheduler:
            continue
        ended = getattr(candidate.reader(), "job_ended", None)
        if ended is not None and ended(job_id):
            return True
    return False


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


def standalone(job: Job) -> Rendezvous | None:
    """One node, no scheduler: torchrun's standalone rendezvous (or a fixed port, cluster.local.rdzv_port)."""
    if job.cluster.nodes != 1:
        return None
    procs = str(job.cluster.procs_per_node)
    if job.cluster.local.rdzv_port:
        return Rendezvous("local", ["--nnodes", "1", "--nproc-per-node", procs, "--master-addr", "127.0.0.1",
                                    "--master-port", str(job.cluster.local.rdzv_port)], "local")
    return Rendezvous("local", ["--standalone", "--nnodes", "1", "--nproc-per-node", procs], "local")


def from_environment(job: Job, env: Mapping[str, str]) -> Rendezvous:
    """Pick the rendezvous for this process's environment: the scheduler whose variables are set parses them (the
    highest precedence first: a PyTorchJob's, then Slurm's), else this machine alone."""
    from .backends import schedulers

    for _, reader in _schedulers_here(env):
        found = reader.rendezvous(job, env)
        if found is not None:
            return found
    found = standalone(job)
    if found is not None:
        return found
    known = schedulers()
    raise RendezvousError(
        f"cluster.nodes is {job.cluster.nodes} but neither {' nor '.join(s.hint for s in known)} variables are set; "
        f"run through `mtk launch --backend {'|'.join(s.backend for s in known)}`"
    )
