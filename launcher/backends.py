"""The backend contract and registry.

A backend translates a Job into files + submit commands (``render``: pure, deterministic, what ``--dry-run``
prints) and then acts on them (``submit``/``status``/``logs``/``cancel``). Backends are registered by module
path so that a Slurm user never imports the Kubernetes client. Adding a backend = one module + one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mtk.files import atomic_write, current_umask  # noqa: F401  (re-exported; new code imports mtk.files)

if TYPE_CHECKING:
    from .runs import Run
    from .spec import Job

REGISTRY: dict[str, str] = {
    "local": "mtk.launcher.local:LocalBackend",
    "slurm": "mtk.slurm.backend:SlurmBackend",
    "eks": "mtk.k8s.backend:EksBackend",
}


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
    state: str  # PENDING RUNNING COMPLETED FAILED CANCELLED UNKNOWN
    id: str = ""
    exit_code: int | None = None
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)


class Backend(Protocol):
    name: str

    def render(self, job: Job, run_dir: str) -> Artifacts: ...

    def submit(self, job: Job, artifacts: Artifacts) -> Run: ...

    def status(self, run: Run) -> list[StepStatus]: ...

    def logs(self, run: Run, follow: bool = False, step: str | None = None,
             node: str | None = None) -> Iterator[str]: ...

    def cancel(self, run: Run) -> None: ...


def get_backend(name: str) -> Backend:
    """Instantiate a registered backend; its SDKs load only now."""
    if name not in REGISTRY:
        raise KeyError(f"unknown backend '{name}'; choose one of: {', '.join(REGISTRY)}")
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)()
