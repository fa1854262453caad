"""Refusals a real launch makes before it writes its run dir or submits: what would otherwise be refused only
on the nodes, after the job waited in the queue.

Two kinds: the backend's own (``Backend.launch_problems(job, run_dir)``: e.g. Slurm refuses an
``image.sqsh`` this machine cannot read) and the checkpoint dir's writer lease (:mod:`mtk.training.lease`),
judged by the rules rank 0 applies on the nodes. A dry run makes neither: it touches no cluster path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtk.checkpoint_paths import checkpoint_dir

from .spec.errors import Problem, SpecError

if TYPE_CHECKING:
    from .backends import Backend
    from .spec import Job


def running_writer(job: Job, run_dir: str) -> list[Problem]:
    """A problem naming the live run that holds the checkpoint dir's lease, or none."""
    from mtk.training.lease import LEASE, describe, live_holder

    field = "train.checkpoint.dir"
    root = checkpoint_dir(job.train.checkpoint.dir, run_dir)
    holder = live_holder(root, run_dir)
    if holder is None:
        return []
    held_by = holder.get("run_dir") or "?"
    return [Problem(field if job.train.checkpoint.dir else "--run-dir", f"{root} is being written by "
                    f"{describe(holder)}; this launch would queue and then be refused on the nodes. Stop that run "
                    f"first (`mtk cancel {held_by}`), give this one its own {field}, or delete {root}/{LEASE} "
                    "if that run's node is gone", root)]


def check_before_submit(impl: Backend, job: Job, run_dir: str) -> None:
    """Raise SpecError (exit 2, nothing written) listing every refusal."""
    problems = list(impl.launch_problems(job, run_dir))
    if not impl.remote_paths:  # e.g. EKS: the checkpoint dir is a pod path on FSx
        problems += running_writer(job, run_dir)
    if problems:
        raise SpecError(problems)
