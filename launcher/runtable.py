"""One row per run for ``mtk ls``: what a person scanning a week of experiments wants to see first.

State comes from the run's backend (the same answer ``mtk status`` gives, folded into one word); progress,
loss and throughput from the run's ``metrics.jsonl`` when this machine can read it (an EKS run dir is a pod
path: those columns stay empty there). A run dir with a rendered spec but no run record is RENDERED: a preview,
listed only when asked (``mtk ls --all``). A running run's ETA is its remaining iterations at the pace of its
last logged ones.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mtk import run_layout
from mtk.run_outcome import nothing_to_do
from mtk.runs import RECORD, Run, run_records
from mtk.steps import StepState

if TYPE_CHECKING:
    from mtk.backends import StepStatus

# Folding step states into one run state: the first rule that matches wins. STOPPED (``mtk stop``: checkpoint
# saved, the engine's exit 43) ends a run as asked; it shows unless something failed or still runs. Steps the run
# ended without needing (``StepStatus.needed`` False: a successor cancelled as "not needed") are left out first.
_FOLD = (StepState.FAILED, StepState.CANCELLED, StepState.RUNNING, StepState.PENDING, StepState.STOPPED,
         StepState.UNKNOWN)


@dataclass
class RunRow:
    name: str
    backend: str
    state: str
    iteration: int | None
    total: int | None
    loss: float | None
    tokens_per_s: float | None
    restarts: int
    started: float | None
    run_dir: str
    reason: str = ""
    eta_s: float | None = None  # seconds left at the recent pace, while it runs
    no_op: bool = False  # a relaunch that found its checkpoint already at the end and trained nothing

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def fold_states(states: list[str]) -> str:
    """Step states → one: any failure shows, then cancellations, then work in progress, then a stop; all done is
    done."""
    if states and all(s == StepState.COMPLETED for s in states):
        return StepState.COMPLETED
    return next((s for s in _FOLD if s in states), StepState.UNKNOWN)


def fold_steps(steps: list[StepStatus]) -> str:
    """The run's state from its steps: :func:`fold_states` over the steps it needed. A Slurm successor that the
    run's own end cancelled (it completed or stopped, so nothing was left to resume) is not a cancellation of the
    run; a run whose every step was left out is UNKNOWN."""
    return fold_states([s.state for s in steps if s.needed])


def _state(run: Run, backend=None) -> tuple[str, str]:
    from mtk.backends import get_backend

    try:
        if run.launch_error:
            from .failed_launch import launch_steps

            steps = launch_steps(run)
        else:
            steps = (backend or get_backend(run.backend)).status(run)
    except Exception as exc:  # a cluster out of reach must not hide the other runs
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StepState.UNKNOWN, f"{run.backend} status failed: {why}"
    reasons = [f"{s.step}: {s.reason}" for s in steps
               if s.reason and s.needed and s.state not in (StepState.COMPLETED, StepState.RUNNING)]
    return fold_steps(steps), "; ".join(reasons)


def run_state(run: Run) -> str:
    """The run's one state, as ``mtk ls`` shows it (its backend's answer folded)."""
    return _state(run)[0]


def _progress(run_dir: Path) -> dict:
    """Iteration, last loss, tokens/s and restarts from metrics.jsonl (kept until the file changes:
    :mod:`.progress_cache`); empty when it is not readable here."""
    from .progress_cache import cached

    path = run_dir / run_layout.METRICS_FILE
    if not path.is_file():
        return {}
    return cached(path, _read_progress)


def _read_progress(path: Path) -> dict:
    from .report.records import read_metrics

    metrics = read_metrics(path)
    live, _ = metrics.timeline()
    if not live:
        return {"restarts": len(metrics.restarts)}
    last = live[-1]
    return {"iteration": last["iteration"], "loss": last.get("lm_loss"), "tokens_per_s": last.get("tokens_per_s"),
            "restarts": len(metrics.restarts), "seconds_per_iteration": _pace(live)}


PACE_WINDOW = 20  # iterations: recent enough to follow a restart's slower start, long enough to smooth noise


def _pace(live: list[dict]) -> float | None:
    """Wall seconds per iteration over the last logged iterations of this run (None with fewer than two)."""
    recent = [r for r in live[-PACE_WINDOW:] if isinstance(r.get("time"), (int, float))]
    if len(recent) < 2 or recent[-1]["iteration"] <= recent[0]["iteration"]:
        return None
    return (recent[-1]["time"] - recent[0]["time"]) / (recent[-1]["iteration"] - recent[0]["iteration"])


def _total(run_dir: Path) -> int | None:
    try:
        iterations = json.loads((run_dir / run_layout.JOB_FILE).read_text())["train"]["iterations"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return iterations if isinstance(iterations, int) else None


def progress(run: Run, state: str) -> dict:
    """What the run's metrics say of its progress, given its folded ``state`` (``mtk ls`` and ``mtk status`` both
    show it): iteration, total, eta_s (while RUNNING), loss, tokens_per_s, restarts, no_op and a note for a no-op."""
    readable = Path(run.run_dir) if Path(run.run_dir).is_dir() else Path(run.record_dir or run.run_dir)
    p = _progress(readable)
    p["no_op"] = p.get("iteration") is None and (done := nothing_to_do(readable)) is not None
    if p["no_op"]:
        p["iteration"] = done  # a relaunch with nothing to do: where its checkpoint stood, not 0
        p["note"] = f"trained nothing: its checkpoint was already at iteration {done}"
    total, pace = _total(readable), p.pop("seconds_per_iteration", None)
    p["total"] = total
    p["eta_s"] = (max(0, total - p["iteration"]) * pace if state == StepState.RUNNING and pace is not None and total
                  and p.get("iteration") is not None else None)
    return p


def row(run: Run, backend=None) -> RunRow:
    state, reason = _state(run, backend)
    p = progress(run, state)
    reason = "; ".join(filter(None, [reason, p.get("note", "")]))
    return RunRow(name=Path(run.record_dir or run.run_dir).name, backend=run.backend, state=state,
                  iteration=p.get("iteration"), total=p["total"], loss=p.get("loss"),
                  tokens_per_s=p.get("tokens_per_s"), restarts=p.get("restarts", 0), started=run.created,
                  run_dir=run.run_dir, reason=reason, eta_s=p["eta_s"], no_op=p["no_op"])


def rendered_only(runs_dir: Path) -> list[RunRow]:
    """Run dirs written by ``mtk render``/``--dry-run`` (a job.json, no run record): never submitted."""
    rows = []
    for job_file in runs_dir.glob(f"*/{run_layout.JOB_FILE}") if runs_dir.is_dir() else []:
        if (job_file.parent / RECORD).exists():
            continue
        backend = _rendered_by(job_file.parent)
        rows.append(RunRow(name=job_file.parent.name, backend=backend, state="RENDERED", iteration=None,
                           total=_total(job_file.parent), loss=None, tokens_per_s=None, restarts=0,
                           started=job_file.stat().st_mtime, run_dir=str(job_file.parent),
                           reason="rendered, never submitted"))
    return rows


def _rendered_by(run_dir: Path) -> str:
    """The backend whose render wrote ``run_dir``, by the file each backend always writes (its render marker)."""
    from mtk.backends import backend_classes

    return next((cls.name for cls in backend_classes()
                 if cls.render_marker and (run_dir / cls.render_marker).exists()), "?")


def table(runs_dir: str | Path = "runs", previews: bool = False) -> list[RunRow]:
    """Every run under ``runs_dir``, newest first; with ``previews``, the rendered-only run dirs too."""
    runs = run_records(runs_dir)
    backends = _asked_once(runs)
    rows = [row(r, backends.get(r.backend)) for r in runs] + (rendered_only(Path(runs_dir)) if previews else [])
    return sorted(rows, key=lambda r: r.started or 0.0, reverse=True)


def _asked_once(runs: list[Run]) -> dict:
    """One backend per name, told all its runs first where it can ask about them at once (Slurm: one squeue for
    1,000 runs instead of 3-4 calls each, issue 45); a backend that cannot is asked run by run."""
    from mtk.backends import get_backend

    out = {}
    for name in dict.fromkeys(r.backend for r in runs if not r.launch_error):
        try:
            backend = get_backend(name)
            prefetch = getattr(backend, "prefetch", None)
            if prefetch is not None:
                prefetch([r for r in runs if r.backend == name and not r.launch_error])
        except Exception:  # a cluster out of reach: each run's own status says so
            continue
        out[name] = backend
    return out


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def format_table(rows: list[RunRow], now: float | None = None) -> str:
    now = time.time() if now is None else now
    head = ("NAME", "BACKEND", "STATE", "ITER", "ETA", "LOSS", "TOKENS/S", "RESTARTS", "STARTED (UTC)", "AGE")
    body = []
    for r in rows:
        it = "-" if r.iteration is None and r.total is None else f"{r.iteration or 0}/{r.total or '?'}"
        if r.no_op:
            it = f"{r.iteration} (nothing to do)"
        eta = "-" if r.eta_s is None else _age(r.eta_s)
        loss = "-" if r.loss is None else f"{r.loss:.4f}"
        tps = "-" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}"
        started = "-" if r.started is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.started))
        age = "-" if r.started is None else _age(max(0.0, now - r.started))
        body.append((r.name, r.backend, r.state, it, eta, loss, tps, str(r.restarts), started, age))
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in (head, *body))
