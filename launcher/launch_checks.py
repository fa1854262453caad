"""Refusals a real launch makes before it writes its run dir or submits: what would otherwise be refused only
on the nodes, after the job waited in the queue.

Three kinds: the backend's own (``Backend.launch_problems(job, run_dir)``: e.g. Slurm refuses an
``image.sqsh`` this machine cannot read), the checkpoint dir's writer lease (:mod:`mtk.training.lease`), taken
here atomically for the run about to be submitted (so of two launches started together exactly one goes on) by the
rules rank 0 applies on the nodes, and a resume at learning rates the checkpoint's optimizer was not saved with
(:func:`mtk.training.reshard.check_lr_groups`, the rule every rank applies again before it loads). A dry run
makes none of them: it touches no cluster path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mtk.checkpoint_paths import checkpoint_dir
from mtk.spec.errors import Problem, SpecError

if TYPE_CHECKING:
    from mtk.backends import Backend
    from mtk.runs import Run
    from mtk.spec import Job


@dataclass
class WriterClaim:
    """The checkpoint dir's lease, held by this launch for the run it is submitting."""

    root: Path
    holder: dict
    made: list[Path] = field(default_factory=list)  # dirs the claim created, removed again if it is given back

    def hand_over(self, run: Run) -> None:
        """To what was submitted, so the claim outlives ``mtk launch``: a scheduler's train job (its queue time
        included), else the process the backend started on this host (the local runner)."""
        from mtk.training import lease

        from mtk.backends import schedulers
        from mtk.steps import Step

        if any(s.backend == run.backend for s in schedulers()):
            job = run.ids.get(Step.TRAIN) or next(reversed(run.ids.values()), "")
            if job:
                lease.hand_over(self.root, self.holder, job_id=job, scheduler=run.backend)
            return
        pids = [int(v) for v in run.ids.values() if v.isdigit()]
        if pids:
            lease.hand_over(self.root, self.holder, pid=pids[0])

    def give_back(self) -> None:
        """The launch did not submit: free the dir (and remove the dirs the claim made, when empty)."""
        from mtk.training import lease

        lease.release(self.root, self.holder)
        for made in self.made:
            try:
                made.rmdir()
            except OSError:
                break


def claim_writer(job: Job, run_dir: str) -> tuple[WriterClaim | None, list[Problem]]:
    """Take the checkpoint dir's lease for the run at ``run_dir``; a problem naming the live holder when another
    run (or a launch of one) has it."""
    from mtk.training.lease import LEASE, LeaseHeld, claim, describe

    field_ = "train.checkpoint.dir"
    root = Path(checkpoint_dir(job.train.checkpoint.dir, run_dir))
    made = [p for p in (root, *root.parents) if not p.exists()]  # deepest first, up to the first that exists
    try:
        return WriterClaim(root, claim(root, run_dir), made), []
    except LeaseHeld as exc:
        holder = exc.holder
        if not holder:
            return None, [Problem(field_ if job.train.checkpoint.dir else "--run-dir", str(exc), str(root))]
    held_by = holder.get("run_dir") or "?"
    return None, [Problem(field_ if job.train.checkpoint.dir else "--run-dir", f"{root} is being written by "
                          f"{describe(holder)}; this launch would be refused on the nodes. Stop that run first "
                          f"(`mtk cancel {held_by}`), give this one its own {field_}, or delete {root}/{LEASE} "
                          "if that run's node is gone", str(root))]


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

    from .ckpt_precheck import CheckpointUnsafe, read_common_state

    path = Path(root) / f"iter_{int(text):07d}"
    try:
        common = read_common_state(path)  # None without a torch_dist checkpoint; never follows a link out of it
    except CheckpointUnsafe as exc:  # a pickle naming os.system (say): refused before anything is submitted
        return [Problem("train.checkpoint.dir", str(exc))]
    except Exception:  # unreadable here: the node's precheck and every rank check again
        return []
    if common is None:
        return []
    try:
        check_lr_groups(common, job, f"checkpoint {path}")
    except ReshardRefused as exc:
        return [Problem(exc.spec_field, str(exc).removeprefix(f"{exc.spec_field}: "))]
    return []


def check_before_submit(impl: Backend, job: Job, run_dir: str) -> WriterClaim | None:
    """Raise SpecError (exit 2) listing every refusal; else return the checkpoint dir's lease, now held for this
    run (None where the checkpoint dir is not on this machine): hand it over once submitted, give it back if not."""
    problems = list(impl.launch_problems(job, run_dir))
    if problems or impl.remote_paths:  # e.g. EKS: the checkpoint dir is a pod path on FSx
        if problems:
            raise SpecError(problems)
        return None
    claim, held = claim_writer(job, run_dir)
    if claim is None:  # a second writer: refused now, before the (slower) resume check reads the checkpoint
        raise SpecError(held)
    problems = resume_lr_change(job, run_dir)
    if problems:
        claim.give_back()
        raise SpecError(problems)
    return claim
