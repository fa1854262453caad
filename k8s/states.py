"""Map Kubernetes/Kubeflow status to mtk's neutral states, each in one table with an UNKNOWN fallback."""

from __future__ import annotations

from mtk.backends import StepStatus
from mtk.steps import StepState

POD_PHASES = {"Pending": StepState.PENDING, "Running": StepState.RUNNING, "Succeeded": StepState.COMPLETED,
              "Failed": StepState.FAILED, "Unknown": StepState.UNKNOWN}
# PyTorchJob condition types (training operator v1.9), by the latest condition whose status is True.
PYTORCHJOB_CONDITIONS = {"Created": StepState.PENDING, "Suspended": StepState.PENDING, "Running": StepState.RUNNING,
                         "Restarting": StepState.RUNNING, "Succeeded": StepState.COMPLETED,
                         "Failed": StepState.FAILED}
JOB_CONDITIONS = {"Complete": StepState.COMPLETED, "Failed": StepState.FAILED, "Suspended": StepState.PENDING}
# TrainJob condition types (Kubeflow Trainer v2.3: Complete and Failed copied from its JobSet's, Suspended); a TrainJob
# has no Running condition: its JobSet's replicated-job counts tell.
TRAINJOB_CONDITIONS = {"Complete": StepState.COMPLETED, "Failed": StepState.FAILED, "Suspended": StepState.PENDING}
# JobSet v0.12's terminal conditions, for the moment before the Trainer copies them onto the TrainJob.
JOBSET_CONDITIONS = {"Completed": StepState.COMPLETED, "Failed": StepState.FAILED, "Suspended": StepState.PENDING}


def _true_conditions(obj: dict) -> list[dict]:
    return [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def pytorchjob_state(obj: dict | None) -> tuple[StepState, str]:
    """(state, reason) from the last True condition; a job without conditions yet is PENDING."""
    if obj is None:
        return StepState.UNKNOWN, "not found"
    conditions = _true_conditions(obj)
    if not conditions:
        return StepState.PENDING, "no conditions yet (operator not running?)"
    last = conditions[-1]
    reason = last.get("reason") or last.get("type", "")
    if last.get("message"):
        reason = f"{reason}: {last['message']}"
    return PYTORCHJOB_CONDITIONS.get(last.get("type", ""), StepState.UNKNOWN), reason


def _said(cond: dict) -> str:
    reason = cond.get("reason") or cond.get("type", "")
    return f"{reason}: {cond['message']}" if cond.get("message") else reason


def trainjob_state(obj: dict | None, jobset: dict | None) -> tuple[StepState, str]:
    """(state, reason) of a TrainJob read with its JobSet: the TrainJob's terminal or Suspended condition, else the
    JobSet's, else RUNNING once every node's pod is ready (JobSet counts a child Job ready when all its pods are),
    else PENDING. The JobSet's restarts (a failed pod restarts the whole gang) are part of the reason."""
    if obj is None:
        return StepState.UNKNOWN, "not found"
    status = (jobset or {}).get("status") or {}
    restarts = int(status.get("restarts") or 0)
    again = f" (restarted {restarts}×)" if restarts else ""
    for cond in reversed(_true_conditions(obj)):
        if cond.get("type") in TRAINJOB_CONDITIONS:
            return TRAINJOB_CONDITIONS[cond["type"]], _said(cond) + again
    if jobset is None:
        return StepState.PENDING, "no JobSet yet (is the Kubeflow Trainer controller running?)"
    for cond in reversed(_true_conditions(jobset)):
        if cond.get("type") in JOBSET_CONDITIONS:
            return JOBSET_CONDITIONS[cond["type"]], _said(cond) + again
    jobs = status.get("replicatedJobsStatus") or []
    want = sum(int(r.get("replicas", 1)) for r in (jobset.get("spec") or {}).get("replicatedJobs") or []) or 1
    ready = sum(int(j.get("ready") or 0) + int(j.get("succeeded") or 0) for j in jobs)
    if jobs and ready >= want:
        return StepState.RUNNING, "every node's pod is ready" + again
    active = sum(int(j.get("active") or 0) for j in jobs)
    return StepState.PENDING, ("pods starting" if active else "no pods yet") + again


def stopped_if_asked(state: StepState, reason: str, run_dir: str) -> tuple[StepState, str]:
    """A Succeeded PyTorchJob (Complete TrainJob) that ended on ``mtk stop`` is STOPPED, as ``mtk report`` and a
    local run say.

    The worker exits 0 after a stop on purpose (``train_step``: a restart policy of OnFailure/ExitCode would
    otherwise start it again), so Kubernetes only knows "Succeeded"; what tells a stop apart is the engine's
    ``state/last_exit.json`` (code 43) in the run dir. ``run_dir`` is the pods' path: it is read when this machine
    sees it too (a shared filesystem mounted at the same path, or a kind cluster's host path). Where it does not,
    nothing in the API objects records the stop, and the job stays COMPLETED; ``mtk report`` on a copy of the run
    dir says STOPPED."""
    if state != StepState.COMPLETED:
        return state, reason

    from mtk import exitcodes
    from mtk.run_outcome import last_exit, stopped_reason

    record = last_exit(run_dir)
    if record and record.get("code") == exitcodes.STOPPED:
        return StepState.STOPPED, stopped_reason(run_dir)
    return state, reason


def job_state(obj: dict | None) -> tuple[StepState, str]:
    """(state, reason) of a batch/v1 Job: terminal conditions first, then active/pending pods."""
    if obj is None:
        return StepState.UNKNOWN, "not found"
    for cond in reversed(_true_conditions(obj)):
        if cond.get("type") in JOB_CONDITIONS:
            return JOB_CONDITIONS[cond["type"]], cond.get("message") or cond.get("reason") or cond["type"]
    status = obj.get("status") or {}
    if status.get("active"):
        return StepState.RUNNING, f"{status['active']} pod(s) active, {status.get('failed', 0)} failed"
    return StepState.PENDING, ""


def deployment_ready(obj: dict | None) -> bool:
    status = (obj or {}).get("status") or {}
    want = ((obj or {}).get("spec") or {}).get("replicas", 1)
    return int(status.get("readyReplicas") or 0) >= want


def pod_status(pod: dict, step: str) -> StepStatus:
    """One pod: phase, restarts, and why it waits or ended (CrashLoopBackOff, OOMKilled, exit code)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    reasons, exit_code = [], None
    for c in containers:
        state = c.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reasons.append(state["waiting"]["reason"])
        if "terminated" in state:
            exit_code = state["terminated"].get("exitCode")
            if state["terminated"].get("reason"):
                reasons.append(state["terminated"]["reason"])
        last = (c.get("lastState") or {}).get("terminated")
        if last and exit_code is None and restarts:
            reasons.append(f"last exit {last.get('exitCode')} ({last.get('reason', '')})".replace(" ()", ""))
    if status.get("reason"):
        reasons.append(status["reason"])
    reason = f"restarts={restarts}" + (f" {'; '.join(reasons)}" if reasons else "")
    return StepStatus(step=step, state=POD_PHASES.get(status.get("phase", ""), StepState.UNKNOWN),
                      id=f"pod/{meta.get('name', '?')}", exit_code=exit_code, reason=reason)
