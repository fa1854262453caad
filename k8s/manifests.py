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

from mtk.netenv import network_env
from mtk.rendezvous import JOIN_STAGGER_KEY, REPLICA_INDEX_VAR
from mtk.steps import DATA_STEPS, Step

from . import names
from .pod import (  # the pod parts every object shares, and the training pod
    NO_API_TOKEN,
    env_list,
    fetched_files,
    pod_placement,
    pod_volumes,
    secret_env,
    security_context,
    step_command,
    train_pod,
    wait_for_data,
)

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
# c10d: torch's own rendezvous port (torch.distributed.elastic's default) for training, the next one for the
# preflight's meeting in the init containers (a different process, before training's store exists).
C10D_PORT = 29400
PREFLIGHT_C10D_PORT = 29401
# preprocess's CPU request without data.corpus.workers (the Slurm backend's data step default too).
DATA_CPUS = 8
# The labels the training operator puts on every pod it creates (pkg/apis/kubeflow.org/v1, v1.9.0;
# pkg/controller.v1/common/pod.go sets the replica index on each pod it creates, a restarted one too).
OPERATOR_JOB_LABEL = "training.kubeflow.org/job-name"
OPERATOR_TYPE_LABEL = "training.kubeflow.org/replica-type"
OPERATOR_INDEX_LABEL = "training.kubeflow.org/replica-index"
# c10d at scale, from the model of torch's one-key compare-and-set chain with the measured per-request costs
# (benchmarks/scale_rendezvous.py, docs/scale.md). Each worker joins every round C10D_JOIN_STAGGER_S x its replica
# index after it is ready (25.6 s for the last of 1,024; 0.175 s for the last of 8): joins that come apart never
# contend, where a thousand at once never complete. Above C10D_LONG_KEEP_ALIVE_ABOVE_NODES the joined agents'
# keep-alives (N / interval compare-and-sets of the whole state per second, all through training) would take half
# the chain at torch's 5 s at 1,024 nodes and all of it at twice the quietly measured cost: 15 s keeps them to a
# sixth, and a dead node then leaves the rendezvous after 45 s (3 intervals), not 15.
C10D_JOIN_STAGGER_S = 0.025
C10D_LONG_KEEP_ALIVE_ABOVE_NODES = 512
C10D_LONG_KEEP_ALIVE_S = 15
TORCH_KEEP_ALIVE_S = 5  # torch's own keep_alive_interval (dynamic_rendezvous.create_handler)


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


def _meta(job: Job, run: str, name: str, component: str) -> dict:
    return {"name": name, "namespace": job.cluster.eks.namespace, "labels": names.labels(run, component)}


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


def training_pods(run: str) -> dict:
    """The labels of the run's training pods, and of no other pod mtk makes: the training pod template's
    ``mtk/run`` and ``mtk/component: train`` (both operators copy them onto every pod; the data Jobs' and etcd's
    pods carry their own component)."""
    return {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: str(Step.TRAIN)}}


def etcd_network_policy(job: Job, run: str) -> dict:
    """Only this run's training pods reach its etcd (the rendezvous store holds who joins the training job; the
    agents and the preflight's init containers, in the training pods, are its only clients)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(job, run, names.etcd(run), "etcd"),
            "spec": {"podSelector": {"matchLabels": {names.LABEL_RUN: run, names.LABEL_COMPONENT: "etcd"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": training_pods(run)}],
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


def c10d_rdzv_conf(job: Job) -> dict[str, str]:
    """The rendezvous conf of a c10d PyTorchJob (PET_RDZV_CONF): the join stagger per replica index, and above
    C10D_LONG_KEEP_ALIVE_ABOVE_NODES nodes the longer keep-alive interval (the constants say why)."""
    conf = {}
    keep_alive = c10d_keep_alive_s(job.cluster.nodes)
    if keep_alive != TORCH_KEEP_ALIVE_S:
        conf["keep_alive_interval"] = str(keep_alive)
    conf[JOIN_STAGGER_KEY] = f"{C10D_JOIN_STAGGER_S:g}"
    return conf


def c10d_keep_alive_s(nodes: int) -> int:
    """The keep-alive interval a c10d PyTorchJob of ``nodes`` runs with: torch's own up to
    C10D_LONG_KEEP_ALIVE_ABOVE_NODES, the longer one above."""
    return C10D_LONG_KEEP_ALIVE_S if nodes > C10D_LONG_KEEP_ALIVE_ABOVE_NODES else TORCH_KEEP_ALIVE_S


def replica_index_env() -> dict:
    """A PyTorchJob worker's replica index, from the label the operator puts on its pod (the downward API): the
    node's own place in the join stagger, known without reading anything shared."""
    return {"name": REPLICA_INDEX_VAR,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{OPERATOR_INDEX_LABEL}']"}}}


def elastic_policy(job: Job, run: str) -> dict:
    """Where the operator points every worker's torchrun (PET_RDZV_BACKEND/ENDPOINT/ID/CONF, PET_NNODES)."""
    c, e = job.cluster, job.cluster.eks
    if e.rendezvous == "c10d":
        where = {"rdzvBackend": "c10d", "rdzvHost": rdzv_service_name(run), "rdzvPort": C10D_PORT,
                 "rdzvConf": [{"key": k, "value": v} for k, v in c10d_rdzv_conf(job).items()]}
    else:
        where = {"rdzvBackend": "etcd-v2", "rdzvHost": names.etcd(run), "rdzvPort": names.ETCD_PORT}
    return {**where, "rdzvId": run, "minReplicas": e.min_nodes or c.nodes, "maxReplicas": c.nodes,
            "maxRestarts": e.max_restarts}


def preflight_rdzv_env(job: Job, run: str) -> list[dict]:
    """The preflight's meeting across pods (the operator gives init containers no rank): the run's etcd, or
    worker 0's init container hosting a c10d store behind the rendezvous Service."""
    conf = {}
    if job.cluster.eks.rendezvous == "c10d":
        endpoint, backend = f"{rdzv_service_name(run)}:{PREFLIGHT_C10D_PORT}", "c10d"
        conf = c10d_rdzv_conf(job)  # the same joins as training's: staggered (init containers get no PET_*)
    else:
        endpoint, backend = f"{names.etcd(run)}:{names.ETCD_PORT}", "etcd-v2"
    env = [{"name": "MTK_PREFLIGHT_RDZV", "value": endpoint},
           {"name": "MTK_PREFLIGHT_RDZV_BACKEND", "value": backend},
           {"name": "MTK_PREFLIGHT_RDZV_ID", "value": f"{run}-preflight"},
           {"name": "MTK_PREFLIGHT_NODES", "value": str(job.cluster.nodes)}]
    if conf:
        env.append({"name": "MTK_PREFLIGHT_RDZV_CONF", "value": ",".join(f"{k}={v}" for k, v in conf.items())})
    return env


def data_job(job: Job, run: str, run_dir: str, step: Step) -> dict:
    """A ``batch/v1`` Job for getdata/preprocess: FSx mounted, no automatic pod restarts, bounded retries."""
    volumes, mounts = pod_volumes(job, run, shm=False)
    container = {"name": str(step), "image": job.image.reference, "command": step_command(step, run_dir),
                 "volumeMounts": mounts, "securityContext": security_context(job)}
    env = env_list(job.cluster.env) + secret_env(job)
    if env:
        container["env"] = env
    corpus = job.data.corpus
    # CPU only (never a GPU, EFA or huge pages): a data pod must not hold what training needs. Preprocess asks for
    # its workers' CPUs (fewer would run each worker on a fraction of a core), else DATA_CPUS.
    cpus = (corpus.workers if corpus is not None and corpus.workers else DATA_CPUS) if step == Step.PREPROCESS else 1
    container["resources"] = {"requests": {"cpu": str(cpus)}}
    pod = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
           **pod_placement(job, with_instance_type=False)}
    if step == Step.PREPROCESS and fetched_files(job):  # applied before getdata completes under --no-wait
        pod["initContainers"] = [wait_for_data(job, mounts, fetched_files(job), Step.GETDATA)]
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


def pytorchjob(job: Job, run: str, run_dir: str) -> dict:
    """The elastic PyTorchJob: one worker pod per node, rendezvous through worker 0's c10d store or the run's
    etcd."""
    c, e = job.cluster, job.cluster.eks
    pod = train_pod(job, run, run_dir, CONTAINER, worker_env(job, run_dir),
                    [{"name": OPERATOR_PORT_NAME, "containerPort": OPERATOR_DEFAULT_PORT, "protocol": "TCP"}],
                    preflight_rdzv_env(job, run), [replica_index_env()] if e.rendezvous == "c10d" else [])
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
    """Only this run's training pods reach each other. Worker 0's c10d store (29400), the preflight's (29401), a
    TrainJob's master port (29500), the store torchrun's agent opens for its workers and NCCL/gloo's bootstrap
    sockets (free ports) all accept whoever connects: a TCPStore has no authentication, so any pod of the cluster
    could write into the run's rendezvous. Traffic between the training pods, on any port, is all they need; the
    run's data pods (which handle what was downloaded) are kept out too. Labels are no identity: whoever may create
    pods in the namespace may forge these (docs/security.md)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(job, run, names.train_policy(run), Step.TRAIN),
            "spec": {"podSelector": training_pods(run), "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": training_pods(run)}]}]}}


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
    else:
        if job.cluster.eks.rendezvous == "c10d":
            objs.append(Obj(Step.TRAIN, rdzv_service(job, run)))
        objs.append(Obj(Step.TRAIN, pytorchjob(job, run, run_dir)))
    for o in objs:  # whose they are: a launch from another run dir with the same run id is refused (backend)
        o.body["metadata"]["annotations"] = {names.ANNOTATION_RUN_DIR: names.run_dir_key(run_dir)}
    return objs


def under_mount(path: str, mount: str) -> bool:
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")
