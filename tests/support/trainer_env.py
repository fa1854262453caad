"""What Kubeflow Trainer v2.3.0 and JobSet v0.12 make of a TrainJob and its TrainingRuntime, and what a node's pod
then receives.

A model of their contract, read from their source (Trainer: ``pkg/runtime/framework/plugins/torch/torch.go``,
``plugins/jobset/{builder,jobset}.go``, ``pkg/constants``; JobSet: ``pkg/controllers/jobset_controller.go``,
``api/jobset/v1alpha2``), used to run rendered pods as plain processes and by the API stand-in. It reads only the
rendered manifests: the JobSet the Trainer builds from the runtime's template (parallelism and completions from
``numNodes``, the torch plugin's ``PET_*`` in the ``node`` container), the pods JobSet's Indexed Job creates (names,
hostnames on the JobSet's subdomain, the completion-index annotation, labels), and each container's env as the
kubelet resolves it (values, downward-API fields, Secret keys).
"""

from __future__ import annotations

import copy
import re

NODE = "node"  # constants.Node: the trainer's replicated job and its container
MASTER_PORT = 29500  # constants.ContainerTrainerPort
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def master_addr(trainjob_name: str) -> str:
    """PET_MASTER_ADDR: ``<trainjob>-node-0-0.<trainjob>`` (the first node's hostname on the JobSet's subdomain)."""
    return f"{trainjob_name}-{NODE}-0-0.{trainjob_name}"


def pod_hostname(trainjob_name: str, index: int) -> str:
    """The hostname the Indexed Job gives node ``index``'s pod: ``<job name>-<index>``, the Job being
    ``<jobset>-node-0``."""
    return f"{trainjob_name}-{NODE}-0-{index}"


def _trainer_job(spec: dict) -> dict:
    return next(j for j in spec["replicatedJobs"]
                if (j["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer")


def _upsert(env: list[dict], items: list[dict]) -> None:
    for item in items:
        for i, e in enumerate(env):
            if e["name"] == item["name"]:
                env[i] = item
                break
        else:
            env.append(item)


def jobset(trainjob: dict, runtime: dict) -> dict:
    """The JobSet the Trainer applies for ``trainjob`` on ``runtime`` (same name and namespace, owned by the
    TrainJob, labelled with the runtime template's labels)."""
    name, ns = trainjob["metadata"]["name"], trainjob["metadata"].get("namespace", "default")
    template = copy.deepcopy(runtime["spec"]["template"])
    spec = template["spec"]
    trainer = trainjob["spec"].get("trainer") or {}
    nodes = trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes") or 1
    node_job = _trainer_job(spec)
    node_job["replicas"] = 1
    node_job["template"]["spec"]["parallelism"] = node_job["template"]["spec"]["completions"] = nodes
    pod = node_job["template"]["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == NODE)
    if "torch" in (runtime["spec"].get("mlPolicy") or {}):
        nproc = trainer.get("numProcPerNode")
        env = container.setdefault("env", [])
        _upsert(env, trainer.get("env") or [])
        _upsert(env, [{"name": "PET_NNODES", "value": str(nodes)},
                      {"name": "PET_NPROC_PER_NODE", "value": "auto" if nproc is None else str(nproc)},
                      {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                          "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}},
                      {"name": "PET_MASTER_ADDR", "value": master_addr(name)},
                      {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)}])
        ports = container.setdefault("ports", [])
        if not any(p.get("containerPort") == MASTER_PORT for p in ports):
            ports.append({"containerPort": MASTER_PORT, "protocol": "TCP"})  # TCP: the API server's default
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "labels": dict((template.get("metadata") or {}).get("labels")
                                                                        or {}),
                         "ownerReferences": [{"apiVersion": trainjob["apiVersion"], "kind": "TrainJob", "name": name,
                                              "uid": f"uid-of-{name}", "controller": True}]},
            "spec": spec}


def pods(js: dict, restart_attempt: int = 0, suffix: str = "x7k2p") -> list[dict]:
    """The pods of the JobSet's trainer Job, one per completion index, as created (phase Pending)."""
    name, ns = js["metadata"]["name"], js["metadata"]["namespace"]
    node_job = _trainer_job(js["spec"])
    job_spec = node_job["template"]["spec"]
    out = []
    for index in range(job_spec.get("completions") or 1):
        template = copy.deepcopy(job_spec["template"])
        labels = {**(template.get("metadata") or {}).get("labels", {}), JOBSET_NAME: name,
                  REPLICATED_JOB: node_job["name"], JOB_INDEX: "0", RESTART_ATTEMPT: str(restart_attempt),
                  INDEX_ANNOTATION: str(index)}
        spec = template["spec"]
        spec["hostname"], spec["subdomain"] = pod_hostname(name, index), name
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{pod_hostname(name, index)}-{suffix}", "namespace": ns, "labels": labels,
                                 "annotations": {INDEX_ANNOTATION: str(index)},
                                 "ownerReferences": [{"kind": "JobSet", "name": name}]},
                    "spec": spec, "status": {"phase": "Pending"}})
    return out


_ANNOTATION = re.compile(r"^metadata\.annotations\['([^']+)'\]$")
_LABEL = re.compile(r"^metadata\.labels\['([^']+)'\]$")


def container_env(pod: dict, container: str, secrets: dict[str, str] | None = None,
                  node_name: str = "") -> dict[str, str]:
    """The env of one container (or init container) of ``pod`` as the kubelet resolves it; HOSTNAME is the pod's
    hostname. A reference it cannot resolve is an error, as it would keep the container from starting."""
    spec = pod["spec"]
    found = next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == container)
    env = {"HOSTNAME": spec.get("hostname") or pod["metadata"]["name"]}
    for e in found.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        source = e["valueFrom"]
        if "secretKeyRef" in source:
            env[e["name"]] = (secrets or {})[source["secretKeyRef"]["key"]]
            continue
        path = source["fieldRef"]["fieldPath"]
        if m := _ANNOTATION.match(path):
            env[e["name"]] = pod["metadata"]["annotations"][m[1]]
        elif m := _LABEL.match(path):
            env[e["name"]] = pod["metadata"]["labels"][m[1]]
        elif path == "spec.nodeName":
            env[e["name"]] = node_name or spec.get("nodeName") or spec.get("hostname", "")
        elif path == "metadata.name":
            env[e["name"]] = pod["metadata"]["name"]
        else:
            raise KeyError(f"{e['name']}: the model resolves no fieldRef {path!r}")
    return env


def command(pod: dict, container: str) -> list[str]:
    """command + args of one container, as the container runtime runs them."""
    spec = pod["spec"]
    found = next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == container)
    return [*found.get("command", []), *found.get("args", [])]
