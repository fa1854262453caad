"""Refusals a real launch makes before it writes its run dir or submits: what would otherwise be refused only
on the nodes, after the job waited in the queue.

Three kinds: the backend's own (``Backend.launch_problems(job, run_dir)``: e.g. Slurm refuses an
``image.sqsh`` this machine cannot read), the checkpoint dir's writer lease (:mod:`mtk.training.lease`),
judged by the rules rank 0 applies on the nodes, and a resume at learning rates the checkpoint's optimizer was not
saved with (:func:`mtk.training.reshard.check_lr_groups`, the rule every rank applies again before it loads). A dry run
makes none of them: it touches no cluster path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mtk.checkpoint_paths import checkpoint_dir
from mtk.spec.errors import Problem, SpecError

if TYPE_CHECKING:
    from mtk.backends import Backend
    from mtk.spec import Job


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


def resume_lr_change(job: Job, run_dir: str) -> list[Problem]:
    """A problem when the checkpoint this launch would resume has other learning rates than the spec
    (:func:`mtk.training.reshard.check_lr_groups`: megatron-core cannot load its optimizer then), or none. Reads
    the tracker and the checkpoint's small common state only, and only when a tracker exists (a resume)."""
    from mtk.checkpoint_paths import TRACKER

    root = checkpoint_dir(job.train.checkpoint.dir, run_dir)
    tracker = Path(root) / TRACKER
    if not job.train.checkpoint.load or not tracker.is_file():
        return []
    text = tracker.read_text(errors="replace").strip()
    if not text.isdigit():  # a release (weights only) or a damaged tracker: the node's precheck names the latter
        return []
    from mtk.training.reshard import ReshardRefused, check_lr_groups

    from .ckpt_precheck import read_common_state

    path = Path(root) / f"iter_{int(text):07d}"
    try:
        common = read_common_state(path) if (path / ".metadata").is_file() else None
    except Exception:  # unreadable here: the node's precheck and every rank check again
        return []
    if common is None:
        return []
    try:
        check_lr_groups(common, job, f"checkpoint {path}")
    except ReshardRefused as exc:
        return [Problem(exc.spec_field, str(exc).removeprefix(f"{exc.spec_field}: "))]
    return []


def check_before_submit(impl: Backend, job: Job, run_dir: str) -> None:
    """Raise SpecError (exit 2, nothing written) listing every refusal."""
    problems = list(impl.launch_problems(job, run_dir))
    if not impl.remote_paths:  # e.g. EKS: the checkpoint dir is a pod path on FSx
        problems += running_writer(job, run_dir)
        problems += resume_lr_change(job, run_dir)
    if problems:
        raise SpecError(problems)
