"""What a run's own files say about how it went: the engine's ``state/last_exit.json`` and whether
``metrics.jsonl`` holds a train iteration.

Why: a relaunch with nothing to do (its checkpoint already at ``train.iterations``) is a real, completed run that
trained nothing; ``mtk ls`` shows where it stood and ``mtk report`` without RUN passes over it to the run that
has figures, saying why, instead of reporting an empty run.
"""

from __future__ import annotations

import json
from pathlib import Path

from mtk import exitcodes, run_layout
from mtk.run_layout import RunLayout


def last_exit(run_dir: str | Path) -> dict | None:
    """The engine's record of why training ended (rank 0 writes it on every backend), or None."""
    try:
        record = json.loads(RunLayout.of(run_dir).last_exit.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def stopped_reason(run_dir: str | Path) -> str:
    """Where a stopped run stopped and what it saved, from the engine's ``state/last_exit.json``."""
    last = last_exit(run_dir) or {}
    try:
        at, saved = int(last["iteration"]), last.get("checkpoint_iteration")
    except (KeyError, TypeError, ValueError):
        return "stopped by the exit trigger (mtk stop); checkpoint saved"
    return (f"stopped by the exit trigger (mtk stop) at iteration {at}, checkpoint {saved}; "
            "launching again resumes")


def record_cancelled(run_dir: str | Path) -> dict | None:
    """Mark the engine's record of a save-on-signal as a cancel (``mtk cancel``, Ctrl-C on a followed local launch),
    so that ``mtk report`` says CANCELLED as ``ls`` and ``status`` do, not "saved for a requeue". Returns the
    record (None: the engine wrote none, or not a save-on-signal)."""
    from mtk.files import atomic_write

    record = last_exit(run_dir)
    if not record or record.get("code") != exitcodes.REQUEUE:
        return None
    record["cancelled"] = True
    atomic_write(RunLayout.of(run_dir).last_exit, json.dumps(record, indent=2) + "\n")
    return record


def cancelled_reason(record: dict | None) -> str:
    """Where a cancelled run stopped and what it saved, from :func:`record_cancelled`'s record."""
    if not record:
        return "cancelled"
    return (f"cancelled at iteration {record.get('iteration')}, checkpoint {record.get('checkpoint_iteration')} "
            "saved; launching again resumes")


def has_train_records(run_dir: str | Path) -> bool:
    """True once ``metrics.jsonl`` holds a train iteration (read line by line, stopping at the first)."""
    try:
        with open(Path(run_dir) / run_layout.METRICS_FILE, errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("kind", "train") == "train" and "iteration" in record:
                    return True
    except OSError:
        return False
    return False


def nothing_to_do(run_dir: str | Path) -> int | None:
    """The checkpoint's iteration when the run resumed with nothing left to train, else None."""
    record = last_exit(run_dir)
    if record and record.get("reason") == "already complete" and isinstance(record.get("iteration"), int):
        return int(record["iteration"])
    return None


def why_no_figures(run_dir: str | Path) -> str:
    """Why a run has no train record to plot, in a few words."""
    done = nothing_to_do(run_dir)
    if done is not None:
        return f"trained nothing: its checkpoint was already at iteration {done}"
    if not (Path(run_dir) / run_layout.METRICS_FILE).is_file():
        return "no metrics.jsonl here (not started yet, or its run dir is on the cluster)"
    record = last_exit(run_dir)
    if record:
        return f"logged no train iteration (ended: {record.get('reason', '?')})"
    return "has not logged a train iteration yet"


def saved_for_requeue(run_dir: str | Path) -> bool:
    """The engine saved on a signal and nothing marked it cancelled: a requeue, or a scheduler's cancel that only
    the scheduler can tell apart (``scancel`` and a preemption both send SIGTERM)."""
    record = last_exit(run_dir)
    return record is not None and record.get("code") == exitcodes.REQUEUE and not record.get("cancelled")


def ended(run_dir: str | Path, cancelled: bool = False) -> str:
    """How training ended, as ``mtk report`` states it (agreeing with ``mtk status``: a stop is STOPPED).
    ``cancelled``: the run's backend says the run was cancelled (a Slurm ``scancel``), which its files cannot."""
    record = last_exit(run_dir)
    if record is None:
        return "unknown (no state/last_exit.json: still running, or killed before it could write one)"
    code, at, reason = record.get("code"), record.get("iteration"), record.get("reason", "")
    saved = record.get("checkpoint_iteration")
    if code == exitcodes.OK:
        return f"trained nothing: its checkpoint was already at iteration {at}" if reason == "already complete" \
            else f"COMPLETED at iteration {at}"
    if code == exitcodes.STOPPED:
        return f"STOPPED by mtk stop at iteration {at} (checkpoint {saved}); launching again resumes"
    if code == exitcodes.REQUEUE and (record.get("cancelled") or cancelled):
        return f"CANCELLED at iteration {at} (checkpoint {saved}); launching again resumes"
    if code == exitcodes.REQUEUE:
        return f"saved at iteration {at} on {reason.removeprefix('signal ')} for a requeue (checkpoint {saved})"
    return f"FAILED (exit {code}) at iteration {at}: {reason}"
