"""The Kubernetes objects of one run, built as plain dicts (serialised by a YAML library, never pasted).

Order matters and is the order of :func:`build`: the job spec ConfigMap, the etcd Service + Deployment the
workers rendezvous through (``cluster.eks.rendezvous: etcd``), the data Jobs (getdata, preprocess), then the
NetworkPolicy that keeps other pods out of the training pods (their rendezvous stores have no authentication), and
the training itself, in one of two wrappers around one pod (:func:`train_pod`): the c10d rendezvous Service
(``rendezvous: c10d``: worker 0's agent hosts the store) and the ``kubeflow.org/v1`` PyTorchJob (Training Operator
v1), or the run's own TrainingRuntime and the ``trainer.kubeflow.org/v1alpha1`` TrainJob (Kubeflow Trainer v2, on
JobSet). Every function is pure: same job, run dir and operator, same dicts.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mtk.netenv import efa_count, network_env
from mtk.run_layout import RunLayout
from mtk.steps import DATA_STEPS, Step

from . import names

if TYPE_CHECKING:
    from mtk.spec import Job

KUBEFLOW_API = "kubeflow.org/v1"
CONTAINER = "pytorch"  # the training operator only configures the container with this name
PYTORCHJOB, TRAINJOB = "pytorchjob", "trainjob"  # cluster.eks.operator, once resolved
# Kubeflow Trainer v2 (read from its v2.3.0 source: pkg/constants, plugins/torch, plugins/jobset, webhooks).
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
# The torch plugin injects PET_* into the container named "node" of the replicated job labelled as the trainer
# ancestor; the webhook wants that container there and the job's replicas at 1. PET_MASTER_ADDR names the first
# pod of the replicated job "node": <trainjob>-node-0-0.<trainjob> (JobSet's pod hostname and headless Service).
TRAINER_CONTAINER = "node"
TRAINER_JOB = "node"
ANCESTOR_LABEL = f"{TRAINER_GROUP}/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
TRAINER_MASTER_PORT = 29500  # PET_MASTER_PORT: node 0's torchrun agent hosts the static rendezvous store there
JOB_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"  # the node rank
OPERATOR_PORT_NAME = "pytorchjob-port"
OPERATOR_DEFAULT_PORT = 23456
ETCD_DATA = "/var/lib/etcd"
# Restarting a failed worker container in place resumes from the latest checkpoint: the engine auto-loads
# it and the etcd rendezvous admits the restarted agent (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1).
WORKER_RESTART_POLICY = "OnFailure"
# After SIGTERM (eviction, spot reclaim, `mtk cancel`) the train step forwards it to the workers, which finish
# the iteration and save a checkpoint; the kubelet waits this long before SIGKILL (its default is 30 s).
TERMINATION_GRACE_SECONDS = 300
# c10d: torch's own rendezvous port (torch.distributed.elastic's default) for training, the next one for the
# preflight's meeting in the init containers (a different process, before training's store exists).
C10D_PORT = 29400
PREFLIGHT_C10D_PORT = 29401
# preprocess's CPU request without data.corpus.workers (the Slurm backend's data step default too).
DATA_CPUS = 8
# The labels the training operator puts on every pod it creates (pkg/apis/kubeflow.org/v1, v1.9.0).
OPERATOR_JOB_LABEL = "training.kubeflow.org/job-name"
OPERATOR_TYPE_LABEL = "training.kubeflow.org/replica-type"
OPERATOR_INDEX_LABEL = "training.kubeflow.org/replica-index"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
WAIT_SECONDS = 10


@dataclass(frozen=True)
class Obj:
    """One object plus the pipeline step it belongs to (``spec``, ``etcd``, ``getdata``, ``train``...)."""

    step: str
    body: dict

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]


HOSTNAME_LABEL = "kubernetes.io/hostname"


def _meta(job: Job, run: str, name: str, component: str) -> dict:
    return {"name": name, "namespace": job.cluster.eks.namespace, "labels": names.labels(run, component)}


def step_command(step: Step, run_dir: str) -> list[str]:
    """What every pod runs: the one entrypoint, the spec from the ConfigMap, the run dir on shared storage."""
    return ["mtk-entrypoint", str(step), "--job", names.SPEC_PATH, "--run-dir", run_dir]


def _env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": str(v)} for k, v in env.items()]


def _secret_env(job: Job) -> list[dict]:
    """``cluster.secrets`` as ``secretKeyRef``s: the pod spec names the Secret and key, never the value."""
    return [{"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret_name(job.name),
                                                              "key": ref.key or ref.name}}}
            for ref in job.cluster.secrets]


def secret_objects(job: Job, env: dict[str, str]) -> list[dict]:
    """The Secrets ``cluster.secrets`` references, filled from ``env`` (``cluster.eks.sync_secrets``). Never
    rendered into a file: built in memory at submit and sent only in the API request. Shared by every run of
    the job name, so they carry no run label and cancel leaves them."""
    from mtk.secrets import missing
    from mtk.spec.errors import Problem, SpecError

    absent = set(missing(job.cluster.secret_names, env))
    if absent:
        raise SpecError([Problem(f"cluster.secrets.{i}.name", f"{ref.name} is not set here, and "
                                 "cluster.eks.sync_secrets copies the Secret from this environment: export it "
                                 "first (or create the Secret yourself and set sync_secrets: false)", ref.name)
                         for i, ref in enumerate(job.cluster.secrets) if ref.name in absent])
    bodies: dict[str, dict] = {}
    for ref in job.cluster.secrets:
        name = ref.secret_name(job.name)
        body = bodies.setdefault(name, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": {},
                                        "metadata": {"name": name, "labels": {names.LABEL_MANAGED_BY: names.MANAGER}}})
        body["stringData"][ref.key or ref.name] = env[ref.name]
    return list(bodies.values())


def security_context(job: Job, efa: bool = False) -> dict:
    """As restrictive as the GPU stack allows: no privilege escalation, every capability dropped, the
    runtime's default seccomp profile. EFA needs IPC_LOCK (libfabric pins memory for RDMA); NGC images run
    as root, so runAsNonRoot is left to images built for it."""
    caps: dict = {"drop": ["ALL"]}
    if efa:
        caps["add"] = ["IPC_LOCK"]
    return {"allowPrivilegeEscalation": False, "capabilities": caps,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _volumes(job: Job, run: str, shm: bool) -> tuple[list[dict], list[dict]]:
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


def _pod_placement(job: Job, with_instance_type: bool) -> dict:
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


def spec_configmap(job: Job, run: str) -> dict:
    """The job spec every pod reads at /etc/mtk/job.json: the same bytes as the run dir's job.json."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(job, run, names.spec_configmap(run), "spec"),
            "data": {names.SPEC_KEY: job.to_json()}}


def etcd_service(job: Job, run: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(job, run, names.etcd(run), "etcd"),
            "spec": {"selector": {names.LABEL_RUN: run, names.LABEL_COMPONENT: "etcd"},
                     "ports": [{"name": "etcd-client", "port": names.ETCD_PORT, "targetPort": names.ETCD_PORT,
                                "protocol": "TCP"}]}}


def etcd_deployment(job: Job, run: str) -> dict:
    """A single etcd member with the v2 API (torchrun's etcd-v2 rendezvous); its state is per run, in memory."""
    e = job.cluster.eks
    host = names.etcd(run)
    pod_labels = names.labels(run, "etcd")
    args = ["--name", host, "--data-dir", ETCD_DATA, "--enable-v2=true",
            "--listen-client-urls", f"http://0.0.0.0:{names.ETCD_PORT}",
            "--advertise-client-urls", f"http://{host}:{names.ETCD_PORT}",
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", f"{host}=http://127.0.0.1:2380", "--initial-cluster-state", "new"]
    container = {
        "name": "etcd", "image": e.etcd_image, "command": ["/usr/local/bin/etcd"], "args": args,
        "securityContext": security_context(job),
        "ports": [{"name": "client", "containerPort": names.ETCD_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": names.ETCD_PORT},
                           "initialDelaySeconds": 2, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "etcd-data", "mountPath": ETCD_DATA}],
    }
    pod: dict = {"containers": [container], "volumes": [{"name": "etcd-data", "emptyDir": {}}], **NO_API_TOKEN}
    if e.tolerations:
        pod["tolerations"] = [dict(t) for t in e.tolerations]
    if e.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in e.image_pull_secrets]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(job, run, host, "etcd"),
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: "etcd"}},
                     "template": {"metadata": {"labels": pod_labels}, "spec": pod}}}


def etcd_network_policy(job: Job, run: str) -> dict:
    """Only this run's pods reach its etcd (the rendezvous store holds who joins the training job)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(job, run, names.etcd(run), "etcd"),
            "spec": {"podSelector": {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: "etcd"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {names.LABEL_RUN: run}}}],
                                  "ports": [{"protocol": "TCP", "port": names.ETCD_PORT}]}]}}


def rdzv_service_name(run: str) -> str:
    """The c10d rendezvous host every worker dials: a Service naming worker 0's pod."""
    return f"{run}-rdzv"


def rdzv_service(job: Job, run: str) -> dict:
    """c10d: worker 0's torchrun agent hosts the TCPStore (torch compares this name's address with its own and
    serves), every other agent connects. Headless, and published before the pod is ready: the preflight init
    containers meet here while no container of the pod is ready, when the operator's own per-replica Service
    (``<job>-worker-0``) does not resolve yet."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(job, run, rdzv_service_name(run), Step.TRAIN),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {names.LABEL_RUN: run, OPERATOR_JOB_LABEL: names.pytorchjob(run),
                                  OPERATOR_TYPE_LABEL: "worker", OPERATOR_INDEX_LABEL: "0"},
                     "ports": [{"name": "c10d", "port": C10D_PORT, "targetPort": C10D_PORT, "protocol": "TCP"},
                               {"name": "preflight", "port": PREFLIGHT_C10D_PORT, "targetPort": PREFLIGHT_C10D_PORT,
                                "protocol": "TCP"}]}}


def elastic_policy(job: Job, run: str) -> dict:
    """Where the operator points every worker's torchrun (PET_RDZV_BACKEND/ENDPOINT/ID, PET_NNODES)."""
    c, e = job.cluster, job.cluster.eks
    if e.rendezvous == "c10d":
        where = {"rdzvBackend": "c10d", "rdzvHost": rdzv_service_name(run), "rdzvPort": C10D_PORT}
    else:
        where = {"rdzvBackend": "etcd-v2", "rdzvHost": names.etcd(run), "rdzvPort": names.ETCD_PORT}
    return {**where, "rdzvId": run, "minReplicas": e.min_nodes or c.nodes, "maxReplicas": c.nodes,
            "maxRestarts": e.max_restarts}


def preflight_rdzv_env(job: Job, run: str) -> list[dict]:
    """The preflight's meeting across pods (the operator gives init containers no rank): the run's etcd, or
    worker 0's init container hosting a c10d store behind the rendezvous Service."""
    if job.cluster.eks.rendezvous == "c10d":
        endpoint, backend = f"{rdzv_service_name(run)}:{PREFLIGHT_C10D_PORT}", "c10d"
    else:
        endpoint, backend = f"{names.etcd(run)}:{names.ETCD_PORT}", "etcd-v2"
    return [{"name": "MTK_PREFLIGHT_RDZV", "value": endpoint},
            {"name": "MTK_PREFLIGHT_RDZV_BACKEND", "value": backend},
            {"name": "MTK_PREFLIGHT_RDZV_ID", "value": f"{run}-preflight"},
            {"name": "MTK_PREFLIGHT_NODES", "value": str(job.cluster.nodes)}]


def data_job(job: Job, run: str, run_dir: str, step: Step) -> dict:
    """A ``batch/v1`` Job for getdata/preprocess: FSx mounted, no automatic pod restarts, bounded retries."""
    volumes, mounts = _volumes(job, run, shm=False)
    container = {"name": str(step), "image": job.image.reference, "command": step_command(step, run_dir),
                 "volumeMounts": mounts, "securityContext": security_context(job)}
    env = _env_list(job.cluster.env) + _secret_env(job)
    if env:
        container["env"] = env
    corpus = job.data.corpus
    # CPU only (never a GPU, EFA or huge pages): a data pod must not hold what training needs. Preprocess asks for
    # its workers' CPUs (fewer would run each worker on a fraction of a core), else DATA_CPUS.
    cpus = (corpus.workers if corpus is not None and corpus.workers else DATA_CPUS) if step == Step.PREPROCESS else 1
    container["resources"] = {"requests": {"cpu": str(cpus)}}
    pod = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
           **_pod_placement(job, with_instance_type=False)}
    if step == Step.PREPROCESS and fetched_files(job):  # applied before getdata completes under --no-wait
        pod["initContainers"] = [_wait_for_data(job, mounts, fetched_files(job), Step.GETDATA)]
    spec: dict = {"backoffLimit": job.cluster.eks.backoff_limit,
                  "template": {"metadata": {"labels": names.labels(run, step)}, "spec": pod}}
    if step == Step.PREPROCESS and corpus is not None and corpus.shards > 1:
        # One pod per task; each reads its index from JOB_COMPLETION_INDEX (set by the Job controller), works on
        # its slice of the corpus, and the last to finish merges the one output prefix training waits for.
        spec.update(completionMode="Indexed", completions=corpus.shards,
                    parallelism=corpus.max_parallel or corpus.shards)
        spec["backoffLimit"] = job.cluster.eks.backoff_limit * corpus.shards
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(job, run, names.data_job(run, step), step), "spec": spec}


def worker_env(job: Job, run_dir: str) -> dict[str, str]:
    """Env of a training container, before what the operator injects (PET_RDZV_*, PET_NNODES, ...).

    The operator v1.9 does not inject PET_NPROC_PER_NODE for elastic jobs unless the deprecated
    ``elasticPolicy.nProcPerNode`` is used, so it is set here. The job's ``cluster.env`` wins over everything.
    """
    env = {
        "PET_NPROC_PER_NODE": str(job.cluster.procs_per_node),
        # A replaced pod can rejoin only if rendezvous rounds do not share rank 0's TCP store (pytorch #147064).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    env.update(network_env(job, run_dir))
    return env


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


def _wait_for_data(job: Job, mounts: list[dict], files: list[str], step: Step) -> dict:
    """An init container that blocks until ``step``'s outputs exist; paths are argv, never script text."""
    script = ('for f in "$@"; do until [ -s "$f" ]; do echo "waiting for $f (' + step + ' Job)"; '
              f'sleep {WAIT_SECONDS}; done; done')
    return {"name": "wait-for-data", "image": job.image.reference,
            "command": ["sh", "-c", script, "wait-for-data", *files],
            "securityContext": security_context(job),
            "volumeMounts": [m for m in mounts if m["name"] == "fsx"]}


def _worker_resources(job: Job) -> dict:
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
              preflight_env: list[dict]) -> dict:
    """The training pod both wrappers run (PyTorchJob, TrainJob): image, GPUs + EFA, FSx, ``/dev/shm``, secrets by
    reference, NCCL/EFA env, the wait for data and the preflight gate. The wrapper names the container (each
    operator configures its own name), adds what its rendezvous needs to the env and ports, and says how the
    preflight init containers meet (the operators give init containers no rank)."""
    c = job.cluster
    volumes, mounts = _volumes(job, run, shm=True)
    container: dict = {
        "name": container_name, "image": job.image.reference, "command": step_command(Step.TRAIN, run_dir),
        "env": _env_list(env) + _secret_env(job),
        "securityContext": security_context(job, efa=job.cluster.device == "gpu" and efa_count(job) > 0),
    }
    if ports:
        container["ports"] = ports
    container["volumeMounts"] = mounts
    resources = _worker_resources(job)
    if resources:
        container["resources"] = resources
    # The node's name (not the pod's hostname) is what the hang watchdog blames and exclude_nodes avoids.
    container["env"].append({"name": "MTK_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    pod: dict = {"containers": [container], "volumes": volumes,
                 "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                 **_pod_placement(job, with_instance_type=True)}
    if c.exclude_nodes:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(c.exclude_nodes)}]}]}}}
    waits_for = data_files_to_wait_for(job, run_dir)
    producer = Step.PREPROCESS if Step.PREPROCESS in job.steps() else Step.GETDATA
    init = [_wait_for_data(job, mounts, waits_for, producer)] if waits_for else []
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


def pytorchjob(job: Job, run: str, run_dir: str) -> dict:
    """The elastic PyTorchJob: one worker pod per node, rendezvous through worker 0's c10d store or the run's
    etcd."""
    c, e = job.cluster, job.cluster.eks
    pod = train_pod(job, run, run_dir, CONTAINER, worker_env(job, run_dir),
                    [{"name": OPERATOR_PORT_NAME, "containerPort": OPERATOR_DEFAULT_PORT, "protocol": "TCP"}],
                    preflight_rdzv_env(job, run))
    return {
        "apiVersion": KUBEFLOW_API, "kind": "PyTorchJob",
        "metadata": _meta(job, run, names.pytorchjob(run), Step.TRAIN),
        "spec": {
            "elasticPolicy": elastic_policy(job, run),
            "nprocPerNode": str(c.procs_per_node),
            # cleanPodPolicy None keeps finished pods so `mtk logs` can still read them; cancel removes all.
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": e.max_restarts},
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": c.nodes, "restartPolicy": WORKER_RESTART_POLICY,
                           "template": {"metadata": {"labels": names.labels(run, Step.TRAIN)}, "spec": pod}},
            },
        },
    }


def trainjob_master(run: str) -> str:
    """PET_MASTER_ADDR of the TrainJob ``run``: its first node's pod, through JobSet's headless Service (which
    publishes pods before they are ready, so the preflight init containers reach it too)."""
    return f"{names.trainjob(run)}-{TRAINER_JOB}-0-0.{names.trainjob(run)}"


def trainjob_preflight_env(job: Job, run: str) -> list[dict]:
    """The preflight's meeting across a TrainJob's pods: the node numbering is known before any rendezvous (the
    completion index of the Indexed Job), so node 0's init container hosts the all-reduce's store at the master's
    address, on a port of its own (training's store takes the master port once the init containers are done)."""
    return [{"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": JOB_INDEX_FIELD}}},
            {"name": "WORLD_SIZE", "value": str(job.cluster.nodes)},
            {"name": "MASTER_ADDR", "value": trainjob_master(run)},
            {"name": "MASTER_PORT", "value": str(PREFLIGHT_C10D_PORT)}]


def training_runtime(job: Job, run: str, run_dir: str) -> dict:
    """The run's own namespaced TrainingRuntime: the JobSet template that carries :func:`train_pod`.

    One replicated job of ``cluster.nodes`` pods (the torch plugin sets parallelism and completions from the
    TrainJob's numNodes; written here too). A static rendezvous cannot take a pod back alone, so a pod that fails
    fails its Job (``backoffLimit: 0``, pods never restart in place) and JobSet restarts the whole gang, up to
    ``cluster.eks.max_restarts`` times; the restarted trainers resume from the latest checkpoint."""
    c, e = job.cluster, job.cluster.eks
    pod = train_pod(job, run, run_dir, TRAINER_CONTAINER, network_env(job, run_dir), [],
                    trainjob_preflight_env(job, run))
    pod = {"restartPolicy": "Never", **pod}
    node_job = {"name": TRAINER_JOB, "replicas": 1,
                "template": {"metadata": {"labels": {ANCESTOR_LABEL: TRAINER_ANCESTOR}},
                             "spec": {"completionMode": "Indexed", "parallelism": c.nodes, "completions": c.nodes,
                                      "backoffLimit": 0,
                                      "template": {"metadata": {"labels": names.labels(run, Step.TRAIN)},
                                                   "spec": pod}}}}
    return {"apiVersion": TRAINER_API, "kind": "TrainingRuntime",
            "metadata": _meta(job, run, names.training_runtime(run), Step.TRAIN),
            "spec": {"mlPolicy": {"numNodes": c.nodes, "torch": {}},
                     "template": {"metadata": {"labels": names.labels(run, Step.TRAIN)},
                                  "spec": {"failurePolicy": {"maxRestarts": e.max_restarts},
                                           "replicatedJobs": [node_job]}}}}


def trainjob(job: Job, run: str) -> dict:
    """The TrainJob: the run's TrainingRuntime, ``cluster.nodes`` nodes of ``cluster.procs_per_node`` processes
    (given, so the torch plugin never guesses "auto" from the resources)."""
    c = job.cluster
    return {"apiVersion": TRAINER_API, "kind": "TrainJob",
            "metadata": _meta(job, run, names.trainjob(run), Step.TRAIN),
            "spec": {"runtimeRef": {"name": names.training_runtime(run), "apiGroup": TRAINER_GROUP,
                                    "kind": "TrainingRuntime"},
                     "trainer": {"numNodes": c.nodes, "numProcPerNode": c.procs_per_node}}}


def train_network_policy(job: Job, run: str) -> dict:
    """Only this run's pods reach its training pods. Worker 0's c10d store (29400), the preflight's (29401), a
    TrainJob's master port (29500), the store torchrun's agent opens for its workers and NCCL/gloo's bootstrap
    sockets (free ports) all accept whoever connects: a TCPStore has no authentication, so any pod of the cluster
    could write into the run's rendezvous. Traffic from the run's own pods, on any port, is all they need."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(job, run, names.train_policy(run), Step.TRAIN),
            "spec": {"podSelector": {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: str(Step.TRAIN)}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {names.LABEL_RUN: run}}}]}]}}


def build(job: Job, run_dir: str, operator: str = PYTORCHJOB) -> list[Obj]:
    """Every object of the run, in apply order, for ``operator`` (``cluster.eks.operator`` once resolved)."""
    run = names.run_id(run_dir)
    trainjob_run = operator == TRAINJOB
    objs = [Obj("spec", spec_configmap(job, run))]
    if not trainjob_run and job.cluster.eks.rendezvous == "etcd":
        objs += [Obj("etcd", etcd_network_policy(job, run)), Obj("etcd", etcd_service(job, run)),
                 Obj("etcd", etcd_deployment(job, run))]
    objs += [Obj(step, data_job(job, run, run_dir, step)) for step in job.steps() if step in DATA_STEPS]
    objs.append(Obj(Step.TRAIN, train_network_policy(job, run)))  # before any pod it guards exists
    if trainjob_run:  # the TrainJob webhook reads the runtime it names: the runtime first
        objs += [Obj(Step.TRAIN, training_runtime(job, run, run_dir)), Obj(Step.TRAIN, trainjob(job, run))]
        return objs
    if job.cluster.eks.rendezvous == "c10d":
        objs.append(Obj(Step.TRAIN, rdzv_service(job, run)))
    objs.append(Obj(Step.TRAIN, pytorchjob(job, run, run_dir)))
    return objs


def under_mount(path: str, mount: str) -> bool:
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")
