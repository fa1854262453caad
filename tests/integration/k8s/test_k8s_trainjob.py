"""A TrainJob through the real Kubernetes Python client against the API-server STAND-IN, which plays Kubeflow
Trainer and JobSet (apiserver_standin.py, tests/support/trainer_env.py): ``auto`` asks the server and takes the
TrainJob, the launch follows it to running, and status, logs and cancel read TrainJob → JobSet → pods — a failed pod
restarts the whole JobSet, all pods done complete it, and running out of restarts fails the launch's wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mtk.k8s import names
from mtk.k8s.backend import EksBackend, SubmitError

pytestmark = pytest.mark.integration

RUN = "tiny-eks-20261201-040506"


def _job(k8s_jobs, **eks):
    return k8s_jobs.tiny_eks(cluster={"eks": {"operator": "auto", "rendezvous": "c10d", **eks}})


def _pods(state, attempt: int) -> list[str]:
    with state.lock:
        return sorted(o["metadata"]["name"] for o in state.of_kind("Pod")
                      if o["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(attempt))


class Kubelet(threading.Thread):
    """Reports each pod of the given restart attempt as the kubelet would once it starts (``phase``: Running, or
    ended with ``exit_code``), after the launch has read the TrainJob and its JobSet once with the pods pending."""

    def __init__(self, state, attempt: int = 0, phase: str = "Running", exit_code: int | None = None):
        super().__init__(daemon=True)
        self.state, self.attempt, self.phase, self.exit_code = state, attempt, phase, exit_code

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while (not _pods(self.state, self.attempt) or not self.state.reads.get(("default", "jobsets", RUN))) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        for pod in _pods(self.state, self.attempt):
            self.state.pod_ran(pod, self.phase, self.exit_code)


def _launch(standin, k8s_jobs, tmp_path: Path, lines: list[str], **eks):
    backend = EksBackend(poll=0.01, say=lines.append)
    job = _job(k8s_jobs, **eks)
    run_dir = str(tmp_path / RUN)
    assert backend.launch_problems(job, run_dir) == []
    art = backend.render(job, run_dir)
    art.write()
    return backend, job, art


def _train(backend, run) -> tuple[str, str, str]:
    status = {s.step: s for s in backend.status(run) if not s.id.startswith("pod/")}["train"]
    return status.id, status.state, status.reason


def test_auto_launches_a_trainjob_and_status_logs_cancel_read_it_through_its_jobset(standin, k8s_jobs, tmp_path):
    s = standin.state
    lines: list[str] = []
    backend, job, art = _launch(standin, k8s_jobs, tmp_path, lines)
    assert "cluster.eks.operator auto: the cluster serves Kubeflow Trainer v2, so a TrainJob" in lines
    kubelet = Kubelet(s)
    kubelet.start()
    run = backend.submit(job, art)  # follows the TrainJob until its pods run
    kubelet.join()
    assert [(r.kind, r.name) for r in s.requests if r.method == "PATCH"] == [
        ("ConfigMap", f"{RUN}-spec"), ("NetworkPolicy", f"{RUN}-train"), ("TrainingRuntime", RUN), ("TrainJob", RUN)]
    assert not s.of_kind("PyTorchJob") and not s.of_kind("Service") and not s.of_kind("Deployment")
    follow = [ln for ln in lines if ln.startswith("train: ")]
    assert follow[0].startswith(f"train: trainjob/{RUN} PENDING pods pending=2") and "RUNNING pods running=2" in \
        follow[-1], lines
    assert run.ids == {"train": f"TrainJob/{RUN}"} and run.backend_notes["operator"] == "trainjob"
    # The JobSet the Trainer made carries the run's labels; its pods are the run's training pods.
    (js,) = s.of_kind("JobSet")
    assert js["metadata"]["labels"][names.LABEL_RUN] == RUN

    assert _train(backend, run) == (f"TrainJob/{RUN}", "RUNNING", "every node's pod is ready")
    pods = {st.id: st for st in backend.status(run) if st.id.startswith("pod/")}
    assert sorted(pods) == [f"pod/{RUN}-node-0-{i}-a0x7k" for i in (0, 1)]
    assert {st.state for st in pods.values()} == {"RUNNING"} and {st.step for st in pods.values()} == {"train"}

    # mtk logs --node by the pod's hostname (its name ends in a random suffix), from the container "node".
    logs = list(backend.logs(run, node="node-0-1"))
    assert logs == [f"{RUN}-node-0-1-a0x7k: line {n}\n" for n in (1, 2, 3)]
    (read,) = [r for r in s.requests if r.path.endswith(f"/pods/{RUN}-node-0-1-a0x7k/log")]
    assert read.query["container"] == "node"

    # A pod fails: its Job fails and JobSet restarts the whole gang (new pods, restart attempt 1).
    s.pod_ran(f"{RUN}-node-0-1-a0x7k", "Failed", 1)
    assert _pods(s, 0) == [] and _pods(s, 1) == [f"{RUN}-node-0-{i}-a1x7k" for i in (0, 1)]
    assert _train(backend, run) == (f"TrainJob/{RUN}", "PENDING", "pods starting (restarted 1×)")
    for pod in _pods(s, 1):
        s.pod_ran(pod, "Running")
    assert _train(backend, run)[1:] == ("RUNNING", "every node's pod is ready (restarted 1×)")
    for pod in _pods(s, 1):
        s.pod_ran(pod, "Succeeded", 0)
    assert _train(backend, run) == (f"TrainJob/{RUN}", "COMPLETED",
                                    "AllJobsCompleted: jobset completed successfully (restarted 1×)")
    assert {st.state for st in backend.status(run) if st.id.startswith("pod/")} == {"COMPLETED"}

    # cancel: the run's objects and nothing else; the JobSet and its pods go with the TrainJob.
    neighbour = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "metadata": {"name": "someone-else", "namespace": "default",
                              "labels": {names.LABEL_RUN: "someone-else"}}, "spec": {}, "status": {}}
    s.seed(neighbour)
    backend.cancel(run)
    deleted = [(r.kind, r.name) for r in s.requests if r.method == "DELETE"]
    assert deleted == [("TrainJob", RUN), ("TrainingRuntime", RUN), ("NetworkPolicy", f"{RUN}-train"),
                       ("ConfigMap", f"{RUN}-spec")]
    assert [(p, n) for (_, p, n) in s.objects] == [("trainjobs", "someone-else")]
    assert {st.state for st in backend.status(run)} == {"CANCELLED"}


def test_a_trainjob_out_of_restarts_fails_the_wait_with_its_pods_logs(standin, k8s_jobs, tmp_path):
    s = standin.state
    lines: list[str] = []
    backend, job, art = _launch(standin, k8s_jobs, tmp_path, lines, max_restarts=0)
    kubelet = Kubelet(s, phase="Failed", exit_code=1)
    kubelet.start()
    with pytest.raises(SubmitError, match=rf"training TrainJob {RUN} failed: FailedJobs: jobset failed") as err:
        backend.submit(job, art)
    kubelet.join()
    assert f"[{RUN}-node-0-0-a0x7k] {RUN}-node-0-0-a0x7k: line 3" in str(err.value)


@pytest.mark.parametrize(("operator", "rendezvous", "missing", "message"), [
    ("trainjob", "c10d", {"trainjobs", "trainingruntimes"}, "the cluster does not serve a TrainJob + TrainingRuntime "
                                                            "(trainer.kubeflow.org/v1alpha1"),
    ("auto", "c10d", {"trainjobs", "pytorchjobs"}, "the cluster serves neither"),
    ("auto", "etcd", {"pytorchjobs"}, "rendezvous: etcd needs a PyTorchJob"),
])
def test_a_cluster_without_the_operator_is_refused_before_anything_is_applied(standin, k8s_jobs, tmp_path, operator,
                                                                              rendezvous, missing, message):
    standin.state.missing_plurals |= missing
    job = k8s_jobs.tiny_eks(cluster={"eks": {"operator": operator, "rendezvous": rendezvous}})
    (problem,) = EksBackend(say=lambda m: None).launch_problems(job, str(tmp_path / RUN))
    assert problem.path == "cluster.eks.operator" and message in problem.message
    assert not [r for r in standin.state.requests if r.method != "GET"]
