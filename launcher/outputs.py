"""Where a launch will write, checked before anything is submitted: an unwritable runs_dir or checkpoint dir
otherwise fails at the first save, on every rank; a dry run must never overwrite an existing run's record."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .spec.errors import Problem, SpecError

if TYPE_CHECKING:
    from .spec import Job


def _writable_problem(path: str, field: str) -> Problem | None:
    """The nearest existing ancestor of ``path`` must be a directory this user can create entries in."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        if p.is_symlink():  # a dangling link
            return Problem(field, f"{p} is a dangling symlink; fix or remove it", path)
        p = p.parent
    if not p.is_dir():
        return Problem(field, f"{p} is a file, not a directory: choose another location", path)
    if not os.access(p, os.W_OK | os.X_OK):
        return Problem(field, f"{p} is not writable by this user: choose a location you can write "
                       "(or fix its permissions)", path)
    return None


def check_launch_outputs(job: Job, backend: str, run_dir: str, dry_run: bool) -> None:
    problems = []
    if dry_run and (Path(run_dir) / "job.json").exists():
        problems.append(Problem("--run-dir", "holds an existing run (job.json): a dry run writes nothing into it; "
                                "pass a new --run-dir or leave it out", run_dir))
    if backend != "eks":  # EKS paths are pod paths on FSx, not visible here
        for path, field in ((job.cluster.runs_dir, "cluster.runs_dir"), (run_dir, "--run-dir"),
                            (job.train.checkpoint.dir or "", "train.checkpoint.dir")):
            problem = _writable_problem(path, field) if path else None
            if problem and problem not in problems:
                problems.append(problem)
    if problems:
        raise SpecError(problems)
