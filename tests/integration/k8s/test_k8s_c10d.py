"""``cluster.eks.rendezvous: c10d`` for real: the rendered PyTorchJob's pods, run as processes with exactly their
env and command plus what operator v1.9.0 injects (the twin of the etcd pods in test_k8s_pods.py and J4), meet at
worker 0's c10d store through the run's rendezvous Service — first the preflight init containers (their own
store, on their own port), then the training agents — and train; worker 0 (the store's host) is killed, worker
1's agent loses the store and exits non-zero (its container would restart), and the re-created pods resume from
the checkpoint to the last iteration.

No etcd is involved: the Service name resolves to worker 0's address, as a headless Service with
``publishNotReadyAddresses`` does in a cluster, and torch decides that worker 0 hosts the store by comparing that
address with its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mtk.k8s import manifests, names, yamlio
from mtk.k8s.backend import EksBackend
from mtk.launcher.paths import resolve_paths
from support import netpol, operator_env
from support.journey_local import losses as run_losses
from support.pod_net import image_env, pod_logs, wait_pods

pytestmark = pytest.mark.integration

ITERATIONS, SAVE_INTERVAL, KILL_AFTER = 12, 4, 5


def _render(k8s_jobs, root: Path, run_dir: str):
    fsx = root / "fsx"
    job = resolve_paths(k8s_jobs.tiny_eks(
        cluster={"runs_dir": str(fsx / "runs"), "eks": {"fsx_mount": str(fsx), "rendezvous": "c10d"}},
        data={"dir": str(fsx / "data")},
        train={"iterations": ITERATIONS, "global_batch_size": 2, "checkpoint": {"save_interval": SAVE_INTERVAL}}),
        "eks")
    objs = yamlio.load_all(EksBackend().render(job, run_dir).files["manifests/all.yaml"])
    return objs


def test_c10d_pods_meet_at_worker_0_for_preflight_and_training_and_resume_after_the_store_host_dies(
        k8s_jobs, pod_net_factory, tmp_path):
    run_dir = str(tmp_path / "fsx" / "runs" / "tiny-eks-20261128-000001")
    objs = _render(k8s_jobs, tmp_path, run_dir)
    ptj = next(o for o in objs if o["kind"] == "PyTorchJob")
    svc = next(o for o in objs if o["kind"] == "Service")
    assert not [o for o in objs if o["kind"] == "Deployment"], "c10d renders no etcd"
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert [o["metadata"]["name"] for o in policies] == [
        names.train_policy(names.run_id(run_dir))]  # the stores' guard: only the run's training pods reach them
    policy = ptj["spec"]["elasticPolicy"]
    assert (policy["rdzvBackend"], policy["rdzvHost"]) == ("c10d", svc["metadata"]["name"])
    job_name = ptj["metadata"]["name"]
    pod0, pod1 = operator_env.worker_pod(job_name, 0), operator_env.worker_pod(job_name, 1)
    # The pods that meet below, with the labels the operator gives them, are the ones that policy lets in.
    labelled = [netpol.Pod(pod, {**ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"],
                                 manifests.OPERATOR_JOB_LABEL: job_name, manifests.OPERATOR_TYPE_LABEL: "worker",
                                 manifests.OPERATOR_INDEX_LABEL: str(i)}) for i, pod in enumerate((pod0, pod1))]
    assert all(netpol.isolated(policies, dst) and netpol.admits(policies, src, dst, port)
               for src in labelled for dst in labelled
               for port in (manifests.C10D_PORT, manifests.PREFLIGHT_C10D_PORT))
    # The rendezvous Service resolves to worker 0's pod address; each pod resolves its own name to its address.
    net = pod_net_factory({svc["metadata"]["name"]: "127.0.1.1", pod0: "127.0.1.1", pod1: "127.0.1.2"})
    net.put_spec(next(o for o in objs if o["kind"] == "ConfigMap")["data"][names.SPEC_KEY])
    logs = tmp_path / "logs"
    logs.mkdir()
    template = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]

    # 1. The preflight init containers (no operator variables reach them): ranks from worker 0's c10d store.
    init = next(c for c in template["initContainers"] if c["name"] == "preflight")
    init_envs = {i: operator_env.init_container_env(ptj, i, "preflight") for i in (0, 1)}
    assert init_envs[0]["MTK_PREFLIGHT_RDZV"] == f"{svc['metadata']['name']}:{manifests.PREFLIGHT_C10D_PORT}"
    # Joins staggered like training's: each init container its own index (the pod's replica-index label).
    assert [init_envs[i]["MTK_REPLICA_INDEX"] for i in (0, 1)] == ["0", "1"]
    assert init_envs[1]["MTK_PREFLIGHT_RDZV_CONF"] == "mtk_join_stagger=0.025"
    preflights = [net.start_pod(pod, {**image_env(tmp_path), **init_envs[i], "MTK_NODE_NAME": pod},
                                [*init["command"], *init.get("args", [])], logs / f"{pod}-preflight.log")
                  for i, pod in ((1, pod1), (0, pod0))]  # worker 1 first: it waits for the store worker 0 hosts
    assert wait_pods(preflights, logs) == [0, 0], pod_logs(logs)
    assert "mtk: node index 1 joins the rendezvous round in 0.025 s" in (logs / f"{pod1}-preflight.log").read_text()
    verdict = json.loads((Path(run_dir) / "state" / "preflight.json").read_text())
    assert verdict["ok"] and sorted(n["node_rank"] for n in verdict["nodes"]) == [0, 1], verdict
    assert all(n["allreduce_ok"] for n in verdict["nodes"]), verdict

    # 2. Training: the agents meet at worker 0's store (PET_RDZV_ENDPOINT = the Service), then worker 0 dies.
    def start(index: int, pod: str):
        env = {**image_env(tmp_path), **operator_env.worker_pod_env(ptj, index), "MTK_NODE_NAME": pod}
        assert env["PET_RDZV_BACKEND"] == "c10d" and env["PET_RDZV_ENDPOINT"].startswith(svc["metadata"]["name"])
        return net.start_pod(pod, env, operator_env.worker_command(ptj), logs / f"{pod}.log")

    pods = [start(1, pod1), start(0, pod0)]
    deadline = time.monotonic() + 400
    while max(run_losses(Path(run_dir), killed_writer=True), default=0) < KILL_AFTER:
        assert time.monotonic() < deadline, "training did not reach the kill point:\n" + pod_logs(logs)
        assert all(p.poll() is None for p in pods), "a pod ended before the kill:\n" + pod_logs(logs)
        time.sleep(0.2)
    net.kill_pod(pods[1])  # worker 0: the store's host
    code1 = wait_pods([pods[0]], logs)[0]
    assert code1 != 0, "worker 1's agent lost the store and must fail (its container restarts):\n" + pod_logs(logs)
    losses_before = run_losses(Path(run_dir), killed_writer=True)
    assert KILL_AFTER <= max(losses_before) < ITERATIONS, sorted(losses_before)

    # 3. The operator re-creates worker 0 and restarts worker 1's container: same env and command; they resume.
    assert wait_pods([start(1, pod1), start(0, pod0)], logs) == [0, 0], pod_logs(logs)
    text = pod_logs(logs)
    # Training's agents went through mtk's staggered c10d, worker 1 a wait of one step before each round it joined.
    assert "--rdzv-backend mtk-c10d" in text and "mtk_join_index=1" in text, text
    assert "mtk: node index 1 joins the rendezvous round in 0.025 s" in (logs / f"{pod1}.log").read_text(), text
    assert "[checkpoint] resumed from" in text, text
    losses = run_losses(Path(run_dir), killed_writer=True)
    assert sorted(losses) == list(range(1, ITERATIONS + 1)), sorted(losses)
