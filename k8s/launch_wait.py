"""Following an EKS launch step by step: one progress line per change, an optional deadline, and a failed
step's pod logs.

``EksBackend.submit`` applies a step, then asks :class:`Follower` to wait until it is ready (etcd), complete
(getdata, preprocess — an Indexed Job counts its completions) or running (the PyTorchJob or TrainJob). A line is printed
when a step's state or pod counts change (and every ``heartbeat`` seconds otherwise), so a long preprocess
shows it is alive without flooding the terminal. Passing the deadline raises :class:`StoppedWaiting`: the
launch stops *waiting*, never the run — every step also waits in the cluster for the one before it (init
containers on the shared volume), so the rest can be submitted at once and the run goes on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mtk.backends import SubmitStopped
from mtk.exitcodes import INTERRUPTED, WAIT_TIMEOUT, UserFacingError
from mtk.steps import Step, StepState

from . import names, states

if TYPE_CHECKING:
    pass

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class SubmitError(UserFacingError, RuntimeError):
    """A step of the launch failed on the cluster; the message carries the reason and the pods' log tails."""


class StoppedWaiting(SubmitStopped):
    """The launch stopped following (deadline or Ctrl-C); the run itself goes on in the cluster."""

    def __init__(self, message: str, exit_code: int = WAIT_TIMEOUT):
        super().__init__(message, exit_code)  # submit sets .run once every remaining step is applied


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d`` → seconds; anything else is a ValueError."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        seconds = float(raw)
    elif raw and _DURATION.sub("", raw) == "":
        seconds = sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(raw))
    else:
        raise ValueError(f"{text!r} is not a duration: use e.g. 90s, 30m, 2h or 1h30m")
    if seconds <= 0:
        raise ValueError(f"{text!r}: a timeout must be longer than zero")
    return seconds


def format_duration(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


@dataclass(frozen=True)
class Snapshot:
    """What one poll saw of a step; two equal snapshots print one line."""

    step: str
    ident: str
    state: str
    counts: str = ""
    reason: str = ""

    def line(self, elapsed: float) -> str:
        parts = [f"{self.step}: {self.ident} {self.state}", self.counts, f"({format_duration(elapsed)})"]
        text = " ".join(p for p in parts if p)
        return f"{text}: {self.reason}" if self.reason else text


def job_snapshot(step: str, obj: dict | None) -> Snapshot:
    """A batch Job: neutral state plus active/succeeded-of-completions/failed pod counts."""
    state, reason = states.job_state(obj)
    name = ((obj or {}).get("metadata") or {}).get("name", "?")
    status, spec = (obj or {}).get("status") or {}, (obj or {}).get("spec") or {}
    counts = (f"active={status.get('active', 0)} succeeded={status.get('succeeded', 0)}/{spec.get('completions', 1)} "
              f"failed={status.get('failed', 0)}")
    if state == StepState.RUNNING:  # job_state's reason repeats the counts
        reason = ""
    return Snapshot(step, f"job/{name}", state, counts, reason)


def pytorchjob_snapshot(obj: dict | None, pods: list[dict]) -> Snapshot:
    """The PyTorchJob's condition plus its worker pods by phase, and why pending ones wait (ImagePullBackOff)."""
    return _training_snapshot("pytorchjob", obj, *states.pytorchjob_state(obj), pods)


def trainjob_snapshot(obj: dict | None, jobset: dict | None, pods: list[dict]) -> Snapshot:
    """The TrainJob's state (through its JobSet) plus its node pods by phase, and why pending ones wait."""
    return _training_snapshot("trainjob", obj, *states.trainjob_state(obj, jobset), pods)


def _training_snapshot(kind: str, obj: dict | None, state: StepState, reason: str, pods: list[dict]) -> Snapshot:
    name = ((obj or {}).get("metadata") or {}).get("name", "?")
    phases: dict[str, int] = {}
    waiting: list[str] = []
    for pod in pods:
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        phases[phase] = phases.get(phase, 0) + 1
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            why = ((c.get("state") or {}).get("waiting") or {}).get("reason")
            if why and why not in waiting and why not in ("PodInitializing", "ContainerCreating"):
                waiting.append(why)
    counts = " ".join(f"{phase.lower()}={n}" for phase, n in sorted(phases.items())) or "no pods yet"
    if waiting:
        reason = f"{reason}; pods waiting: {', '.join(waiting)}" if reason else f"pods waiting: {', '.join(waiting)}"
    return Snapshot(Step.TRAIN, f"{kind}/{name}", state, f"pods {counts}", reason)


class Follower:
    """Polls one step at a time until it is done, printing a line per change; shares one deadline."""

    def __init__(self, kube, run: str, say: Callable[[str], None], poll: float = 5.0,
                 timeout: float | None = None, heartbeat: float = 600.0,
                 tail: Callable[[str, int], list[str]] | None = None):
        self.kube, self.run, self.say, self.poll = kube, run, say, poll
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.timeout = timeout
        self.heartbeat = heartbeat
        self.tail = tail or (lambda step, lines: [])

    # ------------------------------------------------------------------------------------------ per kind
    def etcd(self, name: str, limit: float) -> None:
        """The rendezvous Deployment ready; ``limit`` is its own bound (an etcd that never starts is an error)."""
        give_up = time.monotonic() + limit

        def probe() -> tuple[Snapshot, bool]:
            obj = self.kube.get("Deployment", name)
            ready = states.deployment_ready(obj)
            status = (obj or {}).get("status") or {}
            want = ((obj or {}).get("spec") or {}).get("replicas", 1)
            snap = Snapshot("etcd", f"deployment/{name}", StepState.RUNNING if ready else StepState.PENDING,
                            f"ready={int(status.get('readyReplicas') or 0)}/{want}")
            if not ready and time.monotonic() > give_up:
                raise SubmitError(f"etcd Deployment {name} not ready after {limit:.0f}s; "
                                  f"see `kubectl -n {self.kube.namespace} describe deployment {name}`")
            return snap, ready

        self._until(probe)

    def job(self, step: str, name: str) -> None:
        """A data Job complete; failed → SubmitError with its failed pods' last log lines."""

        def probe() -> tuple[Snapshot, bool]:
            snap = job_snapshot(step, self.kube.get("Job", name))
            return snap, snap.state == StepState.COMPLETED

        def failed(snap: Snapshot) -> SubmitError:
            return SubmitError(f"{step} Job {name} failed: {snap.reason}\n" + "\n".join(self.tail(step, 40)) +
                               f"\nfix the cause, then `mtk cancel` this run (or `kubectl -n {self.kube.namespace} "
                               f"delete job {name}`) and launch again")

        self._until(probe, failed)

    def pytorchjob(self, name: str) -> None:
        """Training running (or already finished); a failed PyTorchJob → SubmitError with worker log tails."""

        def probe() -> tuple[Snapshot, bool]:
            pods = self.kube.list("Pod", names.selector(self.run, Step.TRAIN))
            snap = pytorchjob_snapshot(self.kube.get("PyTorchJob", name), pods)
            return snap, snap.state in (StepState.RUNNING, StepState.COMPLETED)

        def failed(snap: Snapshot) -> SubmitError:
            tail = "\n".join(self.tail(Step.TRAIN, 40))
            return SubmitError(f"training PyTorchJob {name} failed: {snap.reason}\n{tail}")

        self._until(probe, failed)

    def trainjob(self, name: str) -> None:
        """Training running (or already finished); a failed TrainJob → SubmitError with its pods' log tails."""

        def probe() -> tuple[Snapshot, bool]:
            pods = self.kube.list("Pod", names.selector(self.run, Step.TRAIN))
            snap = trainjob_snapshot(self.kube.get("TrainJob", name), self.kube.get("JobSet", name), pods)
            return snap, snap.state in (StepState.RUNNING, StepState.COMPLETED)

        def failed(snap: Snapshot) -> SubmitError:
            tail = "\n".join(self.tail(Step.TRAIN, 40))
            return SubmitError(f"training TrainJob {name} failed: {snap.reason}\n{tail}")

        self._until(probe, failed)

    # ---------------------------------------------------------------------------------------------- loop
    def _until(self, probe: Callable[[], tuple[Snapshot, bool]],
               failed: Callable[[Snapshot], Exception] | None = None) -> None:
        """Poll until done; the line for a FAILED state is printed before ``failed`` raises."""
        step_started = time.monotonic()
        last: Snapshot | None = None
        last_said = 0.0
        while True:
            snap, done = probe()
            now = time.monotonic()
            if snap != last or now - last_said >= self.heartbeat:
                self.say(snap.line(now - step_started))
                last, last_said = snap, now
            if failed is not None and snap.state == StepState.FAILED:
                raise failed(snap)
            if done:
                return
            if self.deadline is not None and now >= self.deadline:
                raise StoppedWaiting(f"stopped waiting after {format_duration(self.timeout or 0)} (--timeout): "
                                     f"{snap.step} is {snap.state} {snap.counts}".rstrip())
            time.sleep(self.poll if self.deadline is None else max(0.0, min(self.poll, self.deadline - now)))

    def interrupted(self) -> StoppedWaiting:
        return StoppedWaiting(f"stopped waiting after {format_duration(time.monotonic() - self.started)} (Ctrl-C)",
                              INTERRUPTED)


def follow_hint(run_name: str, namespace: str, training: str = "pytorchjobs", run_id: str | None = None) -> str:
    """How to keep following a run that `mtk launch` stopped waiting for (or never waited for); ``run_name``: its
    record's name (what ``mtk status`` takes), ``run_id``: its ``mtk/run`` label when that differs (a run dir name
    that is no DNS label); ``training``: the resource its training is (pytorchjobs, trainjobs)."""
    return (f"follow it with `mtk status {run_name}` and `mtk logs -f {run_name}` (or `kubectl -n {namespace} get "
            f"jobs,{training},pods -l {names.LABEL_RUN}={run_id or run_name}`); stop it with `mtk cancel {run_name}`")
