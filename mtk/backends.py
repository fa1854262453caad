"""The backend contract and registry.

A backend translates a Job into files + submit commands (``render``: pure, deterministic, what ``--dry-run``
prints) and then acts on them (``submit``/``status``/``logs``/``cancel``). It also owns what its scheduler knows:
its rules for a job (``validate``), the scheduler's environment on a node (``rendezvous``), its own launch options,
and the few facts the generic layer asks (``Backend``'s class attributes), so that the CLI, the spec checks, paths
and outputs never name a backend.

Backends are registered by module path so that a Slurm user never imports the Kubernetes client, and a node finds
its scheduler through ``SCHEDULERS`` without importing any backend. Adding a backend = one module + one line in
``REGISTRY`` (in :mod:`mtk.backend_registry`; + one in ``SCHEDULERS`` if its nodes run under a scheduler), or, from
another distribution, one entry point in the ``mtk.backends`` group (``name = "package.module:Class"``; its class's
``scheduler`` says how its nodes recognise theirs).
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, cast

from mtk.backend_registry import OPTIONS, REGISTRY, options_model, registered  # noqa: F401  (re-exported)
from mtk.exitcodes import BadInput, UserFacingError
from mtk.files import atomic_write

from .steps import StepState

if TYPE_CHECKING:
    from .runs import Run
    from .spec.base import Section
    from .spec.errors import Problem
    from .spec.job import Job


@dataclass(frozen=True)
class Scheduler:
    """A scheduler a node can run under, recognised by its variables without importing its backend.

    ``module`` reads them: ``rendezvous(job, env) -> Rendezvous | None`` and ``node_place(env) -> NodePlace |
    None`` (None: ``env`` is not one of its processes after all), and optionally ``job_ended(job_id) -> bool`` (True
    when the scheduler says that job is no longer queued or running)."""

    backend: str  # the backend that launches onto it; a lease names its holder's scheduler by it
    markers: tuple[str, ...]  # name prefixes of the variables it sets in every process it starts
    module: str
    hint: str  # its variables, for the error when a multi-node job finds no scheduler
    precedence: int = 0  # which wins when several match (higher first): a PyTorchJob pod on a Slurm host is a pod

    def marks(self, env: Mapping[str, str]) -> bool:
        return any(key.startswith(self.markers) for key in env)

    def reader(self) -> ModuleType:
        """The module that reads its variables (imported now, not before)."""
        from .loading import load

        return cast(ModuleType, load(self.module))


# The built-in backends' schedulers, by the variables they set on a node: the node imports the reader module of the
# one its environment carries (``mtk.rendezvous``), never a backend.
SCHEDULERS: tuple[Scheduler, ...] = (
    Scheduler("slurm", ("SLURM_",), "mtk.slurm.environment", "Slurm (SLURM_JOB_ID, SLURM_JOB_NODELIST)", 1),
    Scheduler("eks", ("PET_", "JOB_COMPLETION_INDEX"), "mtk.k8s.environment", "Kubeflow (PET_*)", 2),
)


@dataclass(frozen=True)
class Artifacts:
    """What a backend would submit: files for the run dir and the exact commands, in order."""

    backend: str
    run_dir: str
    files: dict[str, str]
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    modes: dict[str, int] = field(default_factory=dict)
    # Where the launching machine keeps these files when run_dir is only reachable from the cluster.
    record_dir: str | None = None

    def write(self, run_dir: str | Path | None = None) -> list[Path]:
        """Write every file atomically (temp file + rename) so a reader never sees half a script."""
        root = Path(run_dir or self.record_dir or self.run_dir)
        written = []
        for rel, text in sorted(self.files.items()):
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, text, self.modes.get(rel, 0o644))
            written.append(dest)
        return written

    def describe(self) -> str:
        """Human-readable dry run: where the files go and the commands that would run."""
        import shlex

        local = self.record_dir or self.run_dir
        lines = [f"backend: {self.backend}", f"run dir: {self.run_dir}", "files:"]
        lines += [f"  {Path(local) / rel}" for rel in sorted(self.files)]
        if self.commands:
            lines.append("would run:")
            lines += [f"  {shlex.join(cmd)}" for cmd in self.commands]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class StepStatus:
    """One step (Slurm job, pod, process) of a run, mapped to a neutral state."""

    step: str
    state: StepState
    id: str = ""
    exit_code: int | None = None
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)
    # False for a step the run ended without needing: a queued Slurm successor cancelled because the run completed
    # or stopped, a local step left unrun after ``mtk stop``. It is shown but does not count toward the run's state.
    needed: bool = True


class SubmitStopped(UserFacingError):
    """``submit`` stopped following the run it started (a deadline, Ctrl-C): the run goes on in the cluster.

    ``run`` is the record of what was submitted (None if nothing was), ``exit_code`` what ``mtk launch`` exits with
    after saving it (or, with nothing submitted, what the error boundary exits with)."""

    def __init__(self, message: str, exit_code: int, run: Run | None = None):
        super().__init__(message)
        self.exit_code = exit_code
        self.run = run


class BadLaunchOption(BadInput, ValueError):
    """``mtk launch``'s step-following options (--wait/--no-wait/--timeout) that this backend refuses: exit 2."""


class LogsError(BadInput, ValueError):
    """``mtk logs --step/--node`` naming nothing in this run (every backend's refusal): the message lists what the
    run has. Bad input: exit 2."""


class Backend(abc.ABC):
    """The contract. A backend implements render/submit/status/logs/cancel (abstract: a backend missing one cannot
    be instantiated) and overrides the facts and hooks below
    where its scheduler differs from the defaults. Each fact answers a question the generic layer would otherwise
    answer by comparing backend names."""

    name: ClassVar[str]
    title: ClassVar[str] = ""  # how messages name it (default: its name)
    # The spec's paths (runs, data, checkpoints) are the cluster's and not visible from the launching machine: kept
    # as written, not checked for existence or writability here, and the run record is kept under ./runs/.
    remote_paths: ClassVar[bool] = False
    # A dry run writes its preview into the run dir itself (the run dir is on this machine).
    previews_in_run_dir: ClassVar[bool] = False
    # The run inherits cluster.secrets from the launching shell, so a launch without them set is refused.
    secrets_from_shell: ClassVar[bool] = True
    # Have megatron-core build the model before submitting: a refusal would otherwise come after queueing.
    megatron_check_by_default: ClassVar[bool] = True
    # A relaunch avoids the nodes that earlier attempts of the run excluded (cluster.exclude_nodes is honoured).
    excludes_nodes: ClassVar[bool] = False
    # `mtk launch` streams the logs unless told otherwise.
    follows_by_default: ClassVar[bool] = False
    # Ctrl-C while following cancels the run (it lives with this terminal) instead of only stopping the stream.
    interrupt_cancels: ClassVar[bool] = False
    # Nsight Systems (debug.nsys) wraps the node agent in what this backend renders.
    runs_nsys: ClassVar[bool] = False
    # A file its render always writes into a run dir: names the backend of a run that was never submitted.
    render_marker: ClassVar[str] = ""
    # Why a `nodes: MIN:MAX` spare-node range is refused here ("" when the backend runs one).
    spare_nodes_refused: ClassVar[str] = ""
    # How its nodes recognise its scheduler (a plugin's; the built-ins' are in SCHEDULERS, so that a node never
    # imports a backend to find out where it runs). None: its processes run without one (like the local backend's).
    scheduler: ClassVar[Scheduler | None] = None
    # The model of its own block, cluster.<name> (a plugin's; the built-ins' are in OPTIONS, so that a spec load
    # imports no backend). None: it takes no options, and a cluster.<name> block is refused as unknown.
    options: ClassVar[type[Section] | None] = None

    @abc.abstractmethod
    def render(self, job: Job, run_dir: str) -> Artifacts:
        """Pure and deterministic: the files for the run dir and the exact commands (what --dry-run prints)."""

    @abc.abstractmethod
    def submit(self, job: Job, artifacts: Artifacts, options: Mapping[str, object] | None = None) -> Run:
        """Act on rendered artifacts; ``options`` is what ``launch_options`` returned (None: the defaults). May raise
        ``SubmitStopped`` carrying the run when it stops following what it submitted."""

    @abc.abstractmethod
    def status(self, run: Run) -> list[StepStatus]:
        """Each step of the run, mapped to a neutral state."""

    @abc.abstractmethod
    def logs(self, run: Run, follow: bool = False, step: str | None = None,
             node: str | None = None) -> Iterator[str]:
        """A step's log lines (``follow``: until it ends)."""

    @abc.abstractmethod
    def cancel(self, run: Run) -> None:
        """Stop every step; safe to repeat."""

    @classmethod
    def validate(cls, job: Job) -> list[Problem]:
        """This backend's rules for a job (its cluster block, what it can run), all problems at once."""
        return []

    def launch_options(self, wait: bool | None, timeout: str | None) -> dict[str, object]:
        """Check ``mtk launch``'s step-following options and turn them into ``submit``'s ``options``; a backend
        that does not follow steps refuses them rather than ignoring them (:class:`BadLaunchOption`)."""
        if wait is not None or timeout is not None:
            followers = [cls.title or cls.name for cls in backend_classes()
                         if cls.launch_options is not Backend.launch_options]
            raise BadLaunchOption(f"--wait/--no-wait/--timeout follow the steps of an {' or '.join(followers)} launch; "
                             f"--backend {self.name} has no such steps to wait for (--follow/--no-follow choose "
                             "whether its logs stream)")
        return {}

    def launch_problems(self, job: Job, run_dir: str) -> list[Problem]:
        """What a real launch refuses before it writes its run dir or submits (e.g. an image file this machine
        cannot read); a dry run does not ask."""
        return []

    def pin_image(self, job: Job) -> tuple[Job, str]:
        """The job with its image pinned the way this backend's nodes pull it, and a line saying so ("": as is)."""
        return job, ""

    def check_render(self, artifacts: Artifacts) -> list[str]:
        """Check the rendered files offline as strictly as the scheduler would (e.g. Kubernetes' schemas for the
        manifests): raise a ``BadInput`` naming the first problem, else return lines saying what was checked.
        ``mtk render`` and ``mtk validate`` call it; a backend whose ``submit`` can be refused this way calls it
        there too, before anything is submitted."""
        return []

    def submitted_note(self, run: Run, options: Mapping[str, object], stopped: SubmitStopped | None) -> str:
        """What to tell the user after ``submit`` returned (or stopped following), on stderr; "" for nothing."""
        return ""


class UnknownBackend(BadInput, KeyError):
    """A backend name no installed distribution registers (e.g. a run record made where a plugin was installed)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def backend_class(name: str) -> type[Backend]:
    """A registered backend's class (its facts and rules); its SDKs load only when it is instantiated or used."""
    known = REGISTRY if name in REGISTRY else registered()  # built-ins: no entry-point scan
    if name not in known:
        raise UnknownBackend(f"unknown backend '{name}'; the installed ones are {', '.join(known)} (a run "
                             "launched with another needs the distribution that registers it installed here)")
    from .loading import load

    return cast("type[Backend]", load(known[name]))


def infer_backend(cluster: object, source: str | None = None) -> tuple[str, str]:
    """(backend, why) for a spec given without ``--backend``: the built-in whose own block the spec's cluster
    section carries (``cluster.slurm`` → slurm; each built-in's block is named after it), else the default with why
    "". A spec with two such blocks names no one backend: SpecError naming the choice."""
    from .spec.errors import Problem, SpecError

    blocks = [n for n in REGISTRY if isinstance(cluster, dict) and isinstance(cluster.get(n), dict)]
    if len(blocks) > 1:
        raise SpecError([Problem("cluster", f"has a block for each of {', '.join(blocks)}, so the backend is not "
                                 f"clear; choose one: --backend {'|'.join(blocks)}")], source)
    if blocks and blocks[0] != next(iter(REGISTRY)):
        return blocks[0], f"the spec's cluster.{blocks[0]} block"
    return next(iter(REGISTRY)), ""


@functools.cache
def schedulers() -> tuple[Scheduler, ...]:
    """Every scheduler a node may run under: the built-ins', then those of backends other distributions register
    (their class is imported to ask; a built-in backend's never is)."""
    plugins = (backend_class(name).scheduler for name in registered() if name not in REGISTRY)
    return SCHEDULERS + tuple(s for s in plugins if s is not None)


def backend_classes() -> list[type[Backend]]:
    return [backend_class(name) for name in registered()]


def get_backend(name: str) -> Backend:
    """Instantiate a registered backend."""
    return backend_class(name)()
