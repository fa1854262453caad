"""What the Kubeflow training operator v1.9.0 adds to a worker container of an elastic PyTorchJob.

A model of the operator's contract (``pkg/controller.v1/pytorch/envvar.go`` and ``elastic.go`` at v1.9.0),
used to check that ``mtk-entrypoint train`` works with exactly what a pod receives, and to run rendered
pods as plain processes in tests. It reads only the rendered manifest.
"""

from __future__ import annotations

import re

from mtk.k8s import manifests


def worker_pod(job_name: str, index: int) -> str:
    """The pod (and per-replica Service) name the training operator gives worker ``index`` of PyTorchJob
    ``job_name``: ``<job>-worker-<index>``."""
    return f"{job_name}-worker-{index}"


def _policy_port(job: dict) -> int:
    policy = job["spec"]["elasticPolicy"]
    if policy.get("rdzvPort") is not None:
        return int(policy["rdzvPort"])
    for container in job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
        if container["name"] == manifests.CONTAINER:
            for port in container.get("ports") or []:
                if port.get("name") == manifests.OPERATOR_PORT_NAME:
                    return int(port["containerPort"])
    raise ValueError("no rdzvPort and no pytorchjob-port on the pytorch container: the operator rejects this")


def injected_env(job: dict) -> dict[str, str]:
    """Variables the operator appends for an elastic job (same for every worker), in its order."""
    spec = job["spec"]
    policy = spec.get("elasticPolicy")
    env = {"PYTHONUNBUFFERED": "0"}
    if policy is None:
        raise ValueError("not an elastic PyTorchJob: spec.elasticPolicy is missing")
    host = policy.get("rdzvHost") or worker_pod(job["metadata"]["name"], 0)
    env["PET_RDZV_ENDPOINT"] = f"{host}:{_policy_port(job)}"
    env["PET_RDZV_BACKEND"] = policy.get("rdzvBackend") or "c10d"
    if policy.get("minReplicas") is None and policy.get("maxReplicas") is None:
        env["PET_NNODES"] = str(spec["pytorchReplicaSpecs"]["Worker"].get("replicas", 1))
    else:
        env["PET_NNODES"] = f"{policy.get('minReplicas')}:{policy.get('maxReplicas')}"
    if policy.get("maxRestarts") is not None:
        env["PET_MAX_RESTARTS"] = str(policy["maxRestarts"])
    if policy.get("nProcPerNode") is not None:  # deprecated field; v1.9 injects it only from here
        env["PET_NPROC_PER_NODE"] = str(policy["nProcPerNode"])
    if policy.get("rdzvId") is not None:
        env["PET_RDZV_ID"] = str(policy["rdzvId"])
    if policy.get("rdzvConf"):
        env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in policy["rdzvConf"])
    if policy.get("standalone"):
        env["PET_STANDALONE"] = ""
    return env


def worker_pod_labels(job: dict, index: int) -> dict[str, str]:
    """The labels of worker ``index``'s pod: the template's, then the ones the operator sets on every pod it creates
    (pkg/controller.v1/common/pod.go: job name, replica type and index)."""
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    return {**(template.get("metadata") or {}).get("labels", {}),
            manifests.OPERATOR_JOB_LABEL: job["metadata"]["name"], manifests.OPERATOR_TYPE_LABEL: "worker",
            manifests.OPERATOR_INDEX_LABEL: str(index)}


_LABEL_REF = re.compile(r"^metadata\.labels\['([^']+)'\]$")


def _resolved(job: dict, index: int, container: dict) -> dict[str, str]:
    """A container's own env as the kubelet gives it in worker ``index``'s pod: plain values, and references to the
    pod's labels (the downward API) resolved; any other reference reads empty here (the tests that run pods set
    what they need, e.g. MTK_NODE_NAME)."""
    labels = worker_pod_labels(job, index)
    env = {}
    for e in container.get("env") or []:
        ref = _LABEL_REF.match(((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))
        env[e["name"]] = labels[ref[1]] if ref else str(e.get("value", ""))
    return env


def worker_pod_env(job: dict, index: int) -> dict[str, str]:
    """The full env of worker ``index``'s training container: the manifest's env, then the operator's.

    Kubernetes also sets HOSTNAME to the pod name, which the operator makes ``<job>-worker-<index>``. Later
    duplicates win, as they do in a pod.
    """
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = next(c for c in template["spec"]["containers"] if c["name"] == manifests.CONTAINER)
    env = {"HOSTNAME": worker_pod(job["metadata"]["name"], index), **_resolved(job, index, container)}
    env.update(injected_env(job))
    return env


def init_container_env(job: dict, index: int, name: str) -> dict[str, str]:
    """The env of worker ``index``'s init container ``name``: its manifest env only (the operator injects its
    PET_* into the containers, not the init containers), HOSTNAME the pod name."""
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = next(c for c in template["spec"].get("initContainers", []) if c["name"] == name)
    return {"HOSTNAME": worker_pod(job["metadata"]["name"], index), **_resolved(job, index, container)}


def worker_command(job: dict) -> list[str]:
    """command + args of the training container, as the container runtime would run them."""
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = next(c for c in template["spec"]["containers"] if c["name"] == manifests.CONTAINER)
    return [*container.get("command", []), *container.get("args", [])]
