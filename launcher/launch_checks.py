"""Refusals a real launch makes before it writes its run dir or submits: what would otherwise be refused only
on the nodes, after the job waited in the queue.

Three kinds: a resume at learning rates the checkpoint's optimizer was not saved with
(:func:`mtk.training.reshard.check_lr_groups`, the rule every rank applies again before it loads) or from a checkpoint
that cannot be read (its tracker and common state, through the policed reader) — checked first, before the launch
writes its run dir or the lease —, the backend's own (``Backend.launch_problems(job, run_dir)``: e.g. Slurm refuses
an ``image.sqsh`` this machine cannot read), and the checkpoint dir's writer lease (:mod:`mtk.training.lease`), taken
here atomically for the run about to be submitted (so of two launches started together exactly one goes on) by the
rules rank 0 applies on the nodes. A dry run makes none of them: it touches no cluster path.
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
    (:func:`mtk.training.reshard.check_lr_groups`: megatron-core cannot load its optimizer then), or none, or
    when its tracker or common state cannot be read (a link, a damaged or hostile file: one line now, not a
    failure on every node). Reads the tracker (a few bytes, never through a link) and the checkpoint's small
    common state only, and only when a tracker exists (a resume)."""
    from mtk.training.reshard import ReshardRefused, check_lr_groups

    from .ckpt_precheck import CheckpointDamaged, read_common_state, read_tracker_entry

    root = Path(checkpoint_dir(job.train.checkpoint.dir, run_dir))
    if not job.train.checkpoint.load:
        return []
    try:
        text = read_tracker_entry(root)
        if text is None or not text.isdigit():  # none, or a release (weights only): nothing to compare
            return []
        path = root / f"iter_{int(text):07d}"
        common = read_common_state(path)  # None without a torch_dist checkpoint; never follows a link out of it
    except CheckpointDamaged as exc:  # a link, a damaged file, a pickle naming os.system: before anything is sent
        return [Problem("train.checkpoint.dir", str(exc))]
    except OSError:  # unreadable here (say, not yet mounted): the node's precheck and every rank check again
        return []
    if common is None:
        return []
    try:
        check_lr_groups(common, job, f"checkpoint {path}")
    except ReshardRefused as exc:
        return [Problem(exc.spec_field, str(exc).removeprefix(f"{exc.spec_field}: "))]
    return []


def check_resume(impl: Backend, job: Job, run_dir: str) -> None:
    """Raise SpecError (exit 2) when the checkpoint this launch would resume cannot be (resume_lr_change). Run
    before the launch writes anything — its run dir, the checkpoint dir's lease —, so that a refusal, or a file
    that crashes the reader despite every bound, leaves nothing behind. Nothing to check where the checkpoint dir
    is not on this machine (EKS: a pod path on FSx)."""
    if impl.remote_paths:
        return
    problems = resume_lr_change(job, run_dir)
    if problems:
        raise SpecError(problems)


def check_before_submit(impl: Backend, job: Job, run_dir: str) -> WriterClaim | None:
    """Raise SpecError (exit 2) listing every refusal; else return the checkpoint dir's lease, now held for this
    run (None where the checkpoint dir is not on this machine): hand it over once submitted, give it back if not.
    The resume itself was checked before (check_resume)."""
    problems = list(impl.launch_problems(job, run_dir))
    if problems or impl.remote_paths:  # e.g. EKS: the checkpoint dir is a pod path on FSx
        if problems:
            raise SpecError(problems)
        return None
    claim, held = claim_writer(job, run_dir)
    if claim is None:  # a second writer
        raise SpecError(held)
    return claim
