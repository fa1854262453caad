"""The pod parts every object of a run shares, and the one training pod both operators wrap.

:func:`train_pod` is the pod a PyTorchJob's workers and a TrainJob's nodes run alike: the image, GPUs + EFA, FSx,
``/dev/shm``, secrets by reference, NCCL/EFA env, the wait for data and the preflight gate; the wrapper names the
container and adds what its rendezvous needs (:mod:`k8s.manifests`). Pure functions of the job and run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtk.netenv import efa_count
from mtk.run_layout import RunLayout
from mtk.steps import Step

from . import names

if TYPE_CHECKING:
    from mtk.spec import Job

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HOSTNAME_LABEL = "kubernetes.io/hostname"
WAIT_SECONDS = 10
# After SIGTERM (eviction, spot reclaim, `mtk cancel`) the train step forwards it to the workers, which finish
# the iteration and save a checkpoint; the kubelet waits this long before SIGKILL (its default is 30 s).
TERMINATION_GRACE_SECONDS = 300


def step_command(step: Step, run_dir: str) -> list[str]:
    """What every pod runs: the one entrypoint, the spec from the ConfigMap, the run dir on shared storage."""
    return ["mtk-entrypoint", str(step), "--job", names.SPEC_PATH, "--run-dir", run_dir]


def env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": str(v)} for k, v in env.items()]


def secret_env(job: Job) -> list[dict]:
    """``cluster.secrets`` as ``secretKeyRef``s: the pod spec names the Secret and key, never the value."""
    return [{"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret_name(job.name),
                                                              "key": ref.key or ref.name}}}
            for ref in job.cluster.secrets]


def security_context(job: Job, efa: bool = False) -> dict:
    """As restrictive as the GPU stack allows: no privilege escalation, every capability dropped, the
    runtime's default seccomp profile. EFA needs IPC_LOCK (libfabric pins memory for RDMA); NGC images run
    as root, so runAsNonRoot is left to images built for it."""
    caps: dict = {"drop": ["ALL"]}
    if efa:
        caps["add"] = ["IPC_LOCK"]
    return {"allowPrivilegeEscalation": False, "capabilities": caps,
            "seccompProfile": {"type": "RuntimeDefault"}}


def pod_volumes(job: Job, run: str, shm: bool) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): the spec ConfigMap always; FSx when a claim is set; a sized /dev/shm for training."""
    e = job.cluster.eks
    volumes = [{"name": "mtk-spec", "configMap": {"name": names.spec_configmap(run),
                                                  "items": [{"key": names.SPEC_KEY, "path": names.SPEC_KEY}]}}]
    mounts = [{"name": "mtk-spec", "mountPath": names.SPEC_DIR, "readOnly": True}]
    if e.fsx_claim:
        volumes.append({"name": "fsx", "persistentVolumeClaim": {"claimName": e.fsx_claim}})
        mounts.append({"name": "fsx", "mountPath": e.fsx_mount})
    if shm:
        # NCCL and DataLoader workers use /dev/shm; the container runtime's 64 MB default hangs or crashes them.
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": e.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


# No mtk pod talks to the Kubernetes API (launch, status and cancel run where `mtk` runs): no pod gets a token.
# IRSA / EKS Pod Identity credentials come through their own projected volumes and are unaffected.
NO_API_TOKEN = {"automountServiceAccountToken": False}
# EFA memory registrations use 2 MiB huge pages; a pod asking for huge pages must also ask for memory (Kubernetes
# validation). AWS's nccl-tests manifest (aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/
# kubernetes/nccl-tests.yaml) asks 5120Mi hugepages-2Mi beside memory: 32000Mi; that is a floor for training, so
# without cluster.eks.memory it is a request only (no limit: the trainer may use the node's memory).
EFA_MEMORY_REQUEST = "32000Mi"


def pod_placement(job: Job, with_instance_type: bool) -> dict:
    """nodeSelector / tolerations / service account / pull secrets (secret names only, never values)."""
    e, c = job.cluster.eks, job.cluster
    spec: dict = dict(NO_API_TOKEN)
    selector = {}
    if with_instance_type and c.instance_type:
        selector[INSTANCE_TYPE_LABEL] = c.instance_type
    selector.update(e.node_selector)
    if selector:
        spec["nodeSelector"] = selector
    if e.tolerations:
        spec["tolerations"] = [dict(t) for t in e.tolerations]
    if e.service_account:
        spec["serviceAccountName"] = e.service_account
    if e.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in e.image_pull_secrets]
    return spec


def fetched_files(job: Job) -> list[str]:
    """Where the getdata Job puts each ``data.fetch`` item (renamed into place only when complete)."""
    if Step.GETDATA not in job.steps():
        return []
    from mtk.data_jobs.getdata import destination

    return [destination(item, job.data.dir) for item in job.data.fetch]


def data_files_to_wait_for(job: Job, run_dir: str) -> list[str]:
    """Files training needs from this run's data Jobs — so training waits under ``--no-wait`` and a plain
    ``kubectl apply`` too: with a preprocess step, this run's data-ready marker (written once the dataset is
    complete and no preprocess still writes it or its index cache: the ``.bin``/``.idx`` appear before the cache,
    and an earlier run's would already be there); without one, what getdata fetches."""
    if Step.PREPROCESS not in job.steps():
        return fetched_files(job)
    return [str(RunLayout.of(run_dir).data_ready)]


def wait_for_data(job: Job, mounts: list[dict], files: list[str], step: Step) -> dict:
    """An init container that blocks until ``step``'s outputs exist; paths are argv, never script text."""
    script = ('for f in "$@"; do until [ -s "$f" ]; do echo "waiting for $f (' + step + ' Job)"; '
              f'sleep {WAIT_SECONDS}; done; done')
    return {"name": "wait-for-data", "image": job.image.reference,
            "command": ["sh", "-c", script, "wait-for-data", *files],
            "securityContext": security_context(job),
            "volumeMounts": [m for m in mounts if m["name"] == "fsx"]}


def worker_resources(job: Job) -> dict:
    c, e = job.cluster, job.cluster.eks
    amounts: dict[str, str | int] = {}
    efa = efa_count(job) if c.device == "gpu" else 0  # a CPU job (CI, smoke test) uses neither, like netenv
    if c.device == "gpu":
        amounts["nvidia.com/gpu"] = c.procs_per_node
        if efa:
            amounts["vpc.amazonaws.com/efa"] = efa
    if efa and e.hugepages:
        amounts["hugepages-2Mi"] = e.hugepages
    if e.cpu:
        amounts["cpu"] = e.cpu
    if e.memory:
        amounts["memory"] = e.memory
    if not amounts:
        return {}
    requests = dict(amounts)
    if "hugepages-2Mi" in amounts and not e.memory:
        requests["memory"] = EFA_MEMORY_REQUEST
    return {"requests": requests, "limits": dict(amounts)}


def train_pod(job: Job, run: str, run_dir: str, container_name: str, env: dict[str, str], ports: list[dict],
              preflight_env: list[dict], env_refs: list[dict] | None = None) -> dict:
    """The training pod both wrappers run (PyTorchJob, TrainJob): image, GPUs + EFA, FSx, ``/dev/shm``, secrets by
    reference, NCCL/EFA env, the wait for data and the preflight gate. The wrapper names the container (each
    operator configures its own name), adds what its rendezvous needs to the env (``env_refs``: references the
    kubelet resolves, in the preflight init container too) and ports, and says how the preflight init containers
    meet (the operators give init containers no rank)."""
    c = job.cluster
    volumes, mounts = pod_volumes(job, run, shm=True)
    container: dict = {
        "name": container_name, "image": job.image.reference, "command": step_command(Step.TRAIN, run_dir),
        "env": env_list(env) + secret_env(job) + list(env_refs or []),
        "securityContext": security_context(job, efa=job.cluster.device == "gpu" and efa_count(job) > 0),
    }
    if ports:
        container["ports"] = ports
    container["volumeMounts"] = mounts
    resources = worker_resources(job)
    if resources:
        container["resources"] = resources
    # The node's name (not the pod's hostname) is what the hang watchdog blames and exclude_nodes avoids.
    container["env"].append({"name": "MTK_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    pod: dict = {"containers": [container], "volumes": volumes,
                 "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                 **pod_placement(job, with_instance_type=True)}
    if c.exclude_nodes:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(c.exclude_nodes)}]}]}}}
    waits_for = data_files_to_wait_for(job, run_dir)
    producer = Step.PREPROCESS if Step.PREPROCESS in job.steps() else Step.GETDATA
    init = [wait_for_data(job, mounts, waits_for, producer)] if waits_for else []
    if job.resilience.preflight.enabled:
        # The health gate (doctor, storage, GPU/EFA counts, nccl-tests, DCGM, one all-reduce across the pods)
        # before the trainer starts.
        init.append({"name": str(Step.PREFLIGHT), "image": job.image.reference,
                     "command": step_command(Step.PREFLIGHT, run_dir), "env": container["env"] + preflight_env,
                     "volumeMounts": mounts, **({"resources": resources} if resources else {})})
    for step in init:  # init containers run on the same node with the same image: same restrictions
        step.setdefault("securityContext", container["securityContext"])
    if init:
        pod["initContainers"] = init
    return pod
