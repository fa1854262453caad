"""J4 on Kubeflow Trainer v2 (issue 51): an EKS user whose cluster serves TrainJob launches with the default
``cluster.eks.operator: auto`` through the real ``mtk`` CLI against the API-server STAND-IN, which plays Kubeflow
Trainer and JobSet (tests/integration/k8s/apiserver_standin.py, tests/support/trainer_env.py). The pods it makes are
run as processes with exactly their env and command (tests/support/pod_net.py): the preflight init containers meet
at node 0 by the completion index, the trainers' torchrun agents meet in a static rendezvous from the torch plugin's
PET_* variables through mtk's node-side code — no etcd, no c10d endpoint. Node 1 is killed after a checkpoint: its
Job fails, JobSet restarts the whole gang, the new pods resume from the checkpoint and finish; ``mtk status`` says
the run completed (after one restart), and so does ``mtk ls``; ``mtk logs`` reads a trainer's real log by its
hostname, ``mtk cancel`` leaves nothing of the run. J4 (test_j4_eks.py) walks the data steps and the PyTorchJob;
this one only training."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mtk.k8s import names, yamlio
from support import trainer_env
from support.journey import step
from support.journey_local import losses, train_records
from support.pod_net import image_env, pod_logs, wait_pods

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUN = "j4tj-20261201-000001"
ITERS, SAVE, KILL_AFTER = 8, 4, 5


def _standin_module():
    name = "mtk_tests_apiserver_standin"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests/integration/k8s/apiserver_standin.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def standin(tmp_path):
    with _standin_module().StandIn() as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: {server.url}\n"
            "users:\n- name: u\n  user:\n    token: standin-token\ncontexts:\n- name: c\n  context:\n"
            "    cluster: s\n    user: u\ncurrent-context: c\n")
        yield server, kubeconfig


def _job_file(tmp_path: Path, fsx: Path) -> Path:
    spec = {"name": "j4tj", "image": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "name": "mtk",
                                      "tag": "t1"},
            "cluster": {"nodes": 2, "procs_per_node": 1, "device": "cpu", "runs_dir": str(fsx / "runs"),
                        "eks": {"fsx_mount": str(fsx), "shm_size": "1Gi", "max_restarts": 2}},
            "data": {"dir": str(fsx / "data"), "num_workers": 0},
            "model": {"preset": "tiny"}, "parallel": {"tp": 2},
            "train": {"micro_batch_size": 2, "global_batch_size": 4, "iterations": ITERS, "lr": 1e-3, "min_lr": 1e-4,
                      "lr_warmup_iters": 2, "precision": "fp32", "log_interval": 1, "eval_interval": None,
                      "checkpoint": {"save_interval": SAVE}},
            "resilience": {"preflight": {"allreduce_mb": 1}}}
    path = tmp_path / "j4tj.yaml"
    path.write_text(yamlio.dump_all([spec]))
    return path


class Cluster:
    """The stand-in's pods of one restart attempt, run as processes: init containers first (all pods' at once,
    as they would start), then the trainers; what each ends with is reported back as the kubelet would."""

    def __init__(self, state, net, home: Path, logs: Path):
        self.state, self.net, self.home, self.logs = state, net, home, logs
        self.trainers: dict[str, subprocess.Popen] = {}

    def pods(self, attempt: int, timeout: float = 120) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            with self.state.lock:
                found = [o for o in self.state.of_kind("Pod")
                         if o["metadata"]["labels"].get(trainer_env.RESTART_ATTEMPT) == str(attempt)]
            if found:
                return sorted(found, key=lambda p: p["spec"]["hostname"])
            assert time.monotonic() < deadline, f"no pods of restart attempt {attempt}"
            time.sleep(0.1)

    def _start(self, pod: dict, container: str) -> subprocess.Popen:
        host = pod["spec"]["hostname"]
        env = {**image_env(self.home), **trainer_env.container_env(pod, container, node_name=host)}
        log = self.logs / f"{pod['metadata']['name']}-{container}.log"
        return self.net.start_pod(host, env, trainer_env.command(pod, container), log)

    def start(self, attempt: int) -> list[str]:
        pods = self.pods(attempt)
        for init in [c["name"] for c in pods[0]["spec"].get("initContainers", [])]:
            assert wait_pods([self._start(pod, init) for pod in pods], self.logs) == [0] * len(pods), \
                pod_logs(self.logs)
        for pod in pods:
            name = pod["metadata"]["name"]
            self.trainers[name] = self._start(pod, trainer_env.NODE)
            self.state.log_files[name] = self.logs / f"{name}-{trainer_env.NODE}.log"
            self.state.pod_ran(name, "Running")
        return [p["metadata"]["name"] for p in pods]


def test_j4_trainjob_auto_static_rendezvous_a_killed_node_restarts_the_gang_which_resumes(standin, pod_net_factory,
                                                                                         tmp_path):
    server, kubeconfig = standin
    state = server.state
    fsx, logs = tmp_path / "fsx", tmp_path / "logs"
    logs.mkdir()
    run_dir = fsx / "runs" / RUN
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)

    def mtk(*args: str, wait: bool = True):
        argv = [sys.executable, "-m", "mtk.launcher.cli", *args]
        if not wait:
            return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    # Each node's pod resolves by its hostname, and node 0 by the name the torch plugin gives the master.
    hosts = {}
    for i in (0, 1):
        host = trainer_env.pod_hostname(RUN, i)
        hosts[host] = hosts[f"{host}.{RUN}"] = f"127.0.5.{i + 1}"
    net = pod_net_factory(hosts)
    cluster = Cluster(state, net, tmp_path, logs)

    with step("mtk launch (operator auto) submits a TrainJob and waits until its pods run"):
        launch = mtk("launch", str(_job_file(tmp_path, fsx)), "--backend", "eks", "--run-dir", str(run_dir),
                     "--no-megatron-check", wait=False)
        first = cluster.pods(0)
        assert [p["spec"]["hostname"] for p in first] == [f"{RUN}-node-0-0", f"{RUN}-node-0-1"]
        net.put_spec(state.objects[("default", "configmaps", names.spec_configmap(RUN))]["data"][names.SPEC_KEY])
        started = cluster.start(0)
        out, err = launch.communicate(timeout=300)
        assert launch.returncode == 0, out + err + pod_logs(logs)
        assert f"train: TrainJob/{RUN}" in out and "the cluster serves Kubeflow Trainer v2, so a TrainJob" in err
        applied = [r.kind for r in state.requests if r.method == "PATCH"]
        assert applied == ["ConfigMap", "NetworkPolicy", "TrainingRuntime", "TrainJob"], applied
        assert not state.of_kind("PyTorchJob") and not state.of_kind("Deployment") and not state.of_kind("Service")
        (trainjob,) = state.of_kind("TrainJob")
        assert trainjob["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 1}

    with step("the preflight met at node 0 by the completion index; the trainers in a static rendezvous"):
        verdict = json.loads((run_dir / "state" / "preflight.json").read_text())
        assert verdict["ok"] and sorted(n["node_rank"] for n in verdict["nodes"]) == [0, 1], verdict
        assert all(n["allreduce_ok"] for n in verdict["nodes"]), verdict
        deadline = time.monotonic() + 600
        while max(losses(run_dir, killed_writer=True), default=0) < KILL_AFTER:
            assert time.monotonic() < deadline, "training did not reach the kill point:\n" + pod_logs(logs)
            assert all(p.poll() is None for p in cluster.trainers.values()), "a pod ended early:\n" + pod_logs(logs)
            time.sleep(0.2)
        node1 = (logs / f"{started[1]}-node.log").read_text()
        master = f"--master-addr {RUN}-node-0-0.{RUN} --master-port 29500"
        assert f"--nnodes 2 --nproc-per-node 1 --node-rank 1 {master}" in node1, node1[-3000:]
        assert "--rdzv" not in node1 and "etcd" not in node1

    with step("node 1 dies: its Job fails, JobSet restarts the gang, which resumes from the checkpoint"):
        killed_at = max(losses(run_dir, killed_writer=True))
        net.kill_pod(cluster.trainers[started[1]])
        state.pod_ran(started[1], "Failed", 137)
        assert not [p for p in started if ("default", "pods", p) in state.objects], "JobSet deletes the old pods"
        net.kill_pod(cluster.trainers[started[0]])  # its Job is deleted with the JobSet's restart
        restarted = cluster.start(1)
        assert wait_pods([cluster.trainers[p] for p in restarted], logs, timeout=600) == [0, 0], pod_logs(logs)
        for pod in restarted:
            state.pod_ran(pod, "Succeeded", 0)
        assert KILL_AFTER <= killed_at < ITERS, killed_at
        again = "".join((logs / f"{p}-node.log").read_text(errors="replace") for p in restarted)
        # The latest checkpoint before the kill, exactly: iteration SAVE (the next one would be the last).
        assert f"[checkpoint] resumed from {fsx}/runs/j4tj/checkpoints/iter_{SAVE:07d}" in again, pod_logs(logs)
        records = train_records(run_dir, killed_writer=True)
        assert sorted(records) == list(range(1, ITERS + 1)), sorted(records)

    with step("mtk status and ls: the TrainJob completed after one restart; mtk logs reads a trainer by hostname"):
        status = mtk("status", RUN, "--json")
        assert status.returncode == 0, status.stderr
        rows = {(s["step"], s["id"]): s for s in json.loads(status.stdout)}
        train = rows[("train", f"TrainJob/{RUN}")]
        assert train["state"] == "COMPLETED" and "(restarted 1×)" in train["reason"], train
        assert {s["state"] for (_, i), s in rows.items() if i.startswith("pod/")} == {"COMPLETED"}
        listed = mtk("ls")
        assert listed.returncode == 0, listed.stderr
        (row,) = [line.split() for line in listed.stdout.splitlines() if line.startswith(RUN)]
        assert row[1:3] == ["eks", "COMPLETED"], listed.stdout
        node_log = mtk("logs", RUN, "--node", "node-0-1")
        assert node_log.returncode == 0, node_log.stderr
        assert node_log.stdout == (logs / f"{restarted[1]}-node.log").read_text(errors="replace")
        assert "--node-rank 1" in node_log.stdout

    with step("mtk cancel leaves nothing of the run"):
        cancel = mtk("cancel", RUN)
        assert cancel.returncode == 0, cancel.stderr
        assert not state.objects, sorted(state.objects)
