"""Status mapping tables (PyTorchJob conditions, Job conditions, pods) and the lazy-import contract."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mtk.k8s import states


def _cond(type_, status="True", reason="", message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(("conditions", "want"), [
    ([], "PENDING"),
    ([_cond("Created")], "PENDING"),
    ([_cond("Created"), _cond("Running")], "RUNNING"),
    ([_cond("Created"), _cond("Running", "False"), _cond("Restarting", reason="PyTorchJobRestarting")], "RUNNING"),
    ([_cond("Created"), _cond("Running", "False"), _cond("Succeeded")], "COMPLETED"),
    ([_cond("Created"), _cond("Failed", message="worker-1 exited 1")], "FAILED"),
    ([_cond("Suspended")], "PENDING"),
    ([_cond("SomethingNew")], "UNKNOWN"),
])
def test_pytorchjob_state(conditions, want):
    state, reason = states.pytorchjob_state({"status": {"conditions": conditions}})
    assert state == want
    if conditions and conditions[-1]["message"]:
        assert conditions[-1]["message"] in reason


def _jobset(ready=0, active=0, succeeded=0, restarts=0, conditions=()):
    return {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]},
            "status": {"restarts": restarts, "conditions": list(conditions), "replicatedJobsStatus": [
                {"name": "node", "ready": ready, "active": active, "succeeded": succeeded, "failed": 0}]}}


@pytest.mark.parametrize(("trainjob", "jobset", "want", "reason"), [
    ({}, None, "PENDING", "no JobSet yet (is the Kubeflow Trainer controller running?)"),
    ({}, _jobset(), "PENDING", "no pods yet"),
    ({}, _jobset(active=1), "PENDING", "pods starting"),
    ({}, _jobset(active=1, ready=1), "RUNNING", "every node's pod is ready"),
    ({}, _jobset(active=1, restarts=2), "PENDING", "pods starting (restarted 2×)"),
    ({}, _jobset(conditions=[_cond("Completed", reason="AllJobsCompleted")]), "COMPLETED", "AllJobsCompleted"),
    ({"conditions": [_cond("Suspended", reason="Suspended")]}, _jobset(active=1, ready=1), "PENDING", "Suspended"),
    ({"conditions": [_cond("Suspended", "False"), _cond("Failed", reason="FailedJobs", message="max restarts")]},
     _jobset(restarts=3), "FAILED", "FailedJobs: max restarts (restarted 3×)"),
    ({"conditions": [_cond("Complete", reason="AllJobsCompleted")]}, None, "COMPLETED", "AllJobsCompleted"),
])
def test_trainjob_state_reads_its_jobset(trainjob, jobset, want, reason):
    """A TrainJob has Complete/Failed/Suspended conditions only: whether its pods run, and how often JobSet
    restarted them, its JobSet tells."""
    assert states.trainjob_state({"status": trainjob}, jobset) == (want, reason)


def test_missing_objects_are_unknown():
    assert states.trainjob_state(None, None) == ("UNKNOWN", "not found")
    assert states.pytorchjob_state(None) == ("UNKNOWN", "not found")
    assert states.job_state(None) == ("UNKNOWN", "not found")
    assert states.deployment_ready(None) is False


@pytest.mark.parametrize(("status", "want"), [
    ({}, "PENDING"),
    ({"active": 1}, "RUNNING"),
    ({"conditions": [_cond("Complete")], "succeeded": 1}, "COMPLETED"),
    ({"conditions": [_cond("FailureTarget"), _cond("Failed", message="BackoffLimitExceeded")]}, "FAILED"),
    ({"active": 1, "conditions": [_cond("Suspended", "False")]}, "RUNNING"),
])
def test_job_state(status, want):
    assert states.job_state({"status": status})[0] == want


def test_deployment_ready_counts_ready_replicas():
    assert not states.deployment_ready({"spec": {"replicas": 1}, "status": {"replicas": 1}})
    assert states.deployment_ready({"spec": {"replicas": 1}, "status": {"readyReplicas": 1}})


def test_pod_status_reports_restarts_waiting_reason_and_exit_code():
    crashloop = {"metadata": {"name": "r-worker-1"}, "status": {"phase": "Running", "containerStatuses": [
        {"restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}
    s = states.pod_status(crashloop, "train")
    assert (s.step, s.state, s.id) == ("train", "RUNNING", "pod/r-worker-1")
    assert "restarts=3" in s.reason and "CrashLoopBackOff" in s.reason and "137 (OOMKilled)" in s.reason
    done = {"metadata": {"name": "r-getdata-abc"}, "status": {"phase": "Failed", "containerStatuses": [
        {"restartCount": 0, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}}
    s = states.pod_status(done, "getdata")
    assert (s.state, s.exit_code) == ("FAILED", 2) and "Error" in s.reason
    evicted = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "Evicted"}}
    assert "Evicted" in states.pod_status(evicted, "train").reason
    assert states.pod_status({"metadata": {"name": "p"}, "status": {"phase": "Weird"}}, "x").state == "UNKNOWN"


def test_backend_imports_and_renders_without_the_kubernetes_client(tmp_path):
    """The eks backend's render path (and mtk --help) never import kubernetes: block it and render."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError("kubernetes blocked for this test")
sys.meta_path.insert(0, Block())
from mtk.backends import get_backend
from mtk.spec import load_job
job = load_job({str(tmp_path / 'job.yaml')!r}, backend="eks")
art = get_backend("eks").render(job, "/fsx/runs/x-1")
assert "manifests/all.yaml" in art.files
assert not any(m.startswith("kubernetes") for m in sys.modules)
print("ok")
"""
    (tmp_path / "job.yaml").write_text(
        "name: x\nimage: {registry: r.example.com}\ncluster: {nodes: 2, procs_per_node: 1, device: cpu,\n"
        "  runs_dir: /fsx/runs}\ndata: {dir: /fsx/data}\nmodel: {preset: tiny}\n"
        "train: {global_batch_size: 4, micro_batch_size: 2, precision: fp32}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_succeeded_job_that_ended_on_mtk_stop_is_stopped_where_the_run_dir_is_readable(tmp_path):
    import json

    (tmp_path / "state").mkdir()
    last = tmp_path / "state" / "last_exit.json"
    last.write_text(json.dumps({"code": 43, "reason": "exit trigger", "iteration": 7, "checkpoint_iteration": 7}))
    state, reason = states.stopped_if_asked("COMPLETED", "PyTorchJobSucceeded", str(tmp_path))
    assert state == "STOPPED" and "iteration 7, checkpoint 7" in reason
    assert states.stopped_if_asked("RUNNING", "r", str(tmp_path)) == ("RUNNING", "r")  # only an ended job
    last.write_text(json.dumps({"code": 0, "reason": "done", "iteration": 9}))
    assert states.stopped_if_asked("COMPLETED", "ok", str(tmp_path)) == ("COMPLETED", "ok")
    # The pods' path, not visible here: nothing records the stop, the job stays as Kubernetes says.
    assert states.stopped_if_asked("COMPLETED", "ok", str(tmp_path / "nowhere")) == ("COMPLETED", "ok")
