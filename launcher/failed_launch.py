"""A launch that failed after it wrote its run dir (``sbatch`` refused, the Kubernetes API failing mid-apply,
Ctrl-C while submitting): its record says so, and the verbs that read records answer without a traceback.

Why a record at all: the run dir exists (rendered files, maybe objects a backend applied before failing), so
``mtk ls`` must not show it as a run of unknown state, ``mtk cancel NAME`` must still reach whatever was
submitted, and a bare ``mtk status``/``logs``/``cancel`` must never pick it as "the newest run"
(:func:`mtk.runs.newest_run` passes over it).
"""

from __future__ import annotations

from pathlib import Path

from mtk.backends import StepStatus
from mtk.runs import RECORD, Run
from mtk.steps import StepState


def describe(exc: BaseException) -> str:
    """One line for the record: the error as the CLI printed it (its lines joined, e.g. a spec error's problem
    list), or what stopped it."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C) while submitting"
    text = " ".join(line.strip() for line in str(exc).strip().splitlines())
    return (text[:497] + "...") if len(text) > 500 else text or type(exc).__name__


def record_failed_launch(backend: str, name: str, run_dir: str, record_dir: str, exc: BaseException) -> Run:
    """Mark the run dir's record as a failed launch, keeping the ids a backend recorded before failing (so
    ``mtk cancel NAME`` can remove what was applied); written even when the backend wrote none."""
    try:
        run = Run.load(Path(record_dir or run_dir) / RECORD)
    except (OSError, ValueError):
        run = Run(backend=backend, run_dir=run_dir, name=name, record_dir=record_dir)
    run.launch_error = describe(exc)
    run.save()
    return run


def launch_steps(run: Run) -> list[StepStatus]:
    """A failed launch as steps: ``launch FAILED`` with the error, then what the backend reports for the ids it
    recorded (if it cannot answer, that is one more line, not a traceback)."""
    steps = [StepStatus("launch", StepState.FAILED, reason=f"the launch failed: {run.launch_error}")]
    if not run.ids:
        steps[0].reason += "; nothing was submitted"
        return steps
    from mtk.backends import get_backend

    try:
        steps += get_backend(run.backend).status(run)
    except Exception as exc:  # the cluster that refused the launch may refuse this too: say so and go on
        steps.append(StepStatus("submitted", StepState.UNKNOWN, ", ".join(run.ids.values()),
                                reason=f"{run.backend} status failed: {describe(exc)}"))
    return steps
