"""``cluster``: resources and the backend-specific blocks (local, slurm, eks).

Neutral fields (nodes, processes per node, device, env) live at the top; each backend reads only its block.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import Section

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")


class LocalSpec(Section):
    """The embedded default: this machine, no container."""

    rdzv_port: int | None = Field(None, ge=1024, le=65535, description="torchrun master port (default: a free one).")


class SlurmSpec(Section):
    """sbatch options and how each node gets its software (``bare`` env or ``pyxis`` container)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = Field("01:00:00", description="Wall-clock limit: MM, HH:MM:SS or D-HH:MM:SS.")
    exclusive: bool = Field(True, description="Whole nodes (GPU jobs); set false to share CPU nodes.")
    cpus_per_task: int | None = Field(None, ge=1, description="CPUs for the one task per node.")
    mem: str | None = Field(None, description="Memory per node, e.g. '0' (all) or '200G'.")
    runtime: Literal["bare", "pyxis"] = Field(
        "pyxis", description="bare: activate venv/conda per node; pyxis: container."
    )
    venv: str | None = Field(None, description="bare: path of a virtualenv to activate on every node.")
    conda_env: str | None = Field(None, description="bare: conda environment name or path.")
    container_image: str | None = Field(None, description="pyxis: .sqsh path or image reference (default: image.sqsh).")
    container_mounts: list[str] = Field(
        default_factory=list, description="pyxis: SRC:DST mounts (data dir and run dir are added)."
    )
    container_workdir: str | None = None
    requeue: bool = Field(True, description="Requeue after a signal-triggered save or a node failure.")
    signal_lead: int = Field(
        600, ge=0, le=65535, description="Seconds before the time limit to send SIGUSR2 (save and exit); 0 disables "
        "(Slurm's --signal takes at most 65535)."
    )
    singleton: bool = Field(False, description="Keep one successor queued (--dependency=singleton) to pick up crashes.")
    max_failures: int = Field(
        3, ge=1, description="Guardrail: stop requeueing after N failures without checkpoint progress."
    )
    rdzv_port: int | None = Field(None, ge=1024, le=65535, description="c10d port (default: derived from the job id).")
    gpu_request: Literal["auto", "gres", "none"] = Field(
        "auto", description="GPU jobs: how training asks Slurm for GPUs. gres: '#SBATCH --gpus-per-node' (clusters "
        "with GPU GRES, e.g. ParallelCluster); none: never (HyperPod without GRES rejects --gpus; --exclusive whole "
        "nodes see every GPU); auto: mtk launch asks `sinfo -o %G` and adds --gpus-per-node only where the "
        "partition's nodes have gpu GRES.")
    hyperpod_auto_resume: bool = Field(
        True, description="On a SageMaker HyperPod node (/opt/sagemaker_cluster exists) run training under "
        "`srun --auto-resume=1`: HyperPod replaces a faulty node and restarts the step in place.")
    extra_sbatch: dict[str, str] = Field(
        default_factory=dict, description="More #SBATCH options, e.g. {constraint: a100}."
    )

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, v: str) -> str:
        if not _SLURM_TIME.match(v):
            raise ValueError("time must look like '90', '01:30:00' or '1-00:00:00'")
        return v


# Kubernetes' own validation rules (apimachinery validation.go, resource.Quantity).
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


def _k8s_label(v: str, what: str) -> str:
    if len(v) > 63 or not _DNS1123_LABEL.match(v):
        raise ValueError(f"{what} must be a DNS-1123 label: ≤ 63 lowercase letters, digits and '-', starting "
                         "and ending with a letter or digit")
    return v


def _k8s_subdomain(v: str, what: str) -> str:
    if len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v):
        raise ValueError(f"{what} must be a DNS-1123 subdomain: ≤ 253 lowercase letters, digits, '-' and '.'")
    return v


def _label_key(k: str) -> None:
    prefix, _, name = k.rpartition("/")
    if prefix:
        _k8s_subdomain(prefix, f"the prefix of label key '{k}'")
    if not name or len(name) > 63 or not _LABEL_VALUE.match(name):
        raise ValueError(f"label key '{k}': the name part must be ≤ 63 letters, digits, '-', '_', '.', starting "
                         "and ending with a letter or digit")


class EksSpec(Section):
    """Kubeflow PyTorchJob placement, storage and rendezvous."""

    namespace: str = "default"
    fsx_claim: str | None = Field("fsx-claim", description="PersistentVolumeClaim of the shared filesystem.")
    fsx_mount: str = Field("/fsx", description="Where the claim is mounted in every pod.")
    shm_size: str = Field("64Gi", description="Size of the memory-backed /dev/shm.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict] = Field(default_factory=list)
    service_account: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list, description="Secret names only; never values.")
    # By digest: a tag can be moved under a running fleet. The digest is the one another public deployment pins
    # for this tag (no registry is reachable where mtk is developed to re-check it); override to re-pin.
    etcd_image: str = Field(
        "quay.io/coreos/etcd:v3.5.17@sha256:a055da833a7c013b836ed0822e8ec1f99b059658be255ad8d0fcd31b635ae3d6",
        description="The rendezvous etcd (v2 API), pinned by digest.")
    hugepages: str | None = Field(
        "5120Mi", description="EFA jobs: hugepages-2Mi each worker requests (libfabric's EFA buffers; AWS's "
        "nccl-tests manifest asks 5120Mi); null leaves them out.")
    max_restarts: int = Field(3, ge=0, le=2**31 - 1, description="Elastic restarts before the job fails.")
    min_nodes: int | None = Field(None, ge=1, description="Must equal nodes (default): elastic ranges are refused "
                                                          "because the engine needs the full world size.")
    cpu: str | None = Field(None, description="CPU request/limit per worker, e.g. '90'.")
    memory: str | None = Field(None, description="Memory request/limit per worker, e.g. '1000Gi'.")
    backoff_limit: int = Field(2, ge=0, le=2**31 - 1, description="Data Jobs: retries before failing.")
    sync_secrets: bool = Field(
        False, description="mtk launch creates/updates each cluster.secrets Secret from this machine's environment "
        "through the API (the values travel only in that request, never in a file).")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return _k8s_label(v, "a namespace")

    @field_validator("fsx_claim", "service_account")
    @classmethod
    def _object_name(cls, v: str | None) -> str | None:
        return None if v is None else _k8s_subdomain(v, "an object name")

    @field_validator("image_pull_secrets")
    @classmethod
    def _secret_names(cls, v: list[str]) -> list[str]:
        for name in v:
            _k8s_subdomain(name, f"Secret name '{name}'")
        return v

    @field_validator("shm_size", "cpu", "memory", "hugepages")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        if v is not None and not _QUANTITY.match(v):
            raise ValueError("not a Kubernetes quantity: a number with an optional suffix, e.g. '90', '500m', "
                             "'64Gi', '1000Gi', '1e3'")
        return v

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            _label_key(key)
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise ValueError(f"label value '{value}' (key '{key}'): ≤ 63 letters, digits, '-', '_', '.', "
                                 "starting and ending with a letter or digit")
        return v


_K8S_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class SecretRef(Section):
    """A secret by reference. The value comes from the launching shell (Slurm, local) or a Kubernetes Secret
    (EKS) and reaches every process as the environment variable ``name``; no file, argv or log holds it."""

    name: str = Field(..., description="Environment variable the processes read, e.g. HF_TOKEN.")
    k8s_secret: str | None = Field(None, description="EKS: Kubernetes Secret holding it (default: <job name>-secrets).")
    key: str | None = Field(None, description="EKS: key inside that Secret (default: name).")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v):
        return {"name": v} if isinstance(v, str) else v

    @field_validator("name")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError(f"'{v}' is not a valid environment variable name (letters, digits, _)")
        return v

    @field_validator("k8s_secret")
    @classmethod
    def _secret_name(cls, v: str | None) -> str | None:
        if v is not None and not _K8S_NAME.match(v):
            raise ValueError("a Kubernetes Secret name: lowercase letters, digits, '-' and '.', ≤ 253 chars")
        return v

    @field_validator("key")
    @classmethod
    def _secret_key(cls, v: str | None) -> str | None:
        if v is not None and not _K8S_KEY.match(v):
            raise ValueError("a Secret key: letters, digits, '-', '_' and '.'")
        return v

    def secret_name(self, job_name: str) -> str:
        return self.k8s_secret or f"{job_name}-secrets"


class ClusterSpec(Section):
    """Resources, shared for all backends."""

    nodes: int = Field(1, ge=1, description="Nodes (Slurm) or worker pods (EKS). On Slurm 'MIN:MAX' (e.g. '8:10') "
                                            "asks for spare nodes: the job takes up to MAX, drops those that fail the "
                                            "preflight and trains on what is healthy if that is at least MIN.")
    min_nodes: int | None = Field(None, ge=1, description="Set by nodes: 'MIN:MAX' (Slurm spare nodes); nodes is then "
                                                          "MAX. The world size is the healthy node count × "
                                                          "procs_per_node; the global batch stays fixed.")
    procs_per_node: int = Field(8, ge=1, description="Training processes per node (= GPUs per node on GPU).")
    device: Literal["gpu", "cpu"] = Field("gpu", description="cpu runs the same code with gloo (CI, laptops).")
    instance_type: str | None = Field(None, description="e.g. p5.48xlarge: selects NCCL/EFA settings and EFA count.")
    efa_per_node: int | None = Field(None, ge=0, description="EFA devices per node (default: from instance_type).")
    gpu_memory_gib: float | None = Field(
        None, gt=0, description="Memory of one GPU in GiB, for validate's fit check of the per-GPU estimate (default: "
        "from instance_type, e.g. p5: 79.6, p4d: 40, p5e/p5en: 140.4; unknown without either: not checked).")
    allow_memory_overcommit: bool = Field(
        False, description="Accept a spec whose per-GPU memory estimate exceeds the GPU's memory (validate refuses it "
        "otherwise): for a layout the estimate over-counts, e.g. CPU offloading.")
    runs_dir: str = Field("runs", description="Where run dirs go; must be shared storage on clusters.")
    pg_timeout_s: int = Field(
        600, ge=60, le=30 * 24 * 3600, description="torch.distributed timeout (s, at most 30 days) for every process "
        "group: how long a rank waits "
        "in a collective (e.g. while rank 0 builds data indices or writes a checkpoint) before failing.")
    exclude_nodes: list[str] = Field(
        default_factory=list, description="Nodes never to run on (Slurm --exclude; EKS node anti-affinity), e.g. "
                                          "the hosts a hang or failed preflight named (state/excluded_nodes)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for every process (overrides presets)."
    )
    secrets: list[SecretRef] = Field(
        default_factory=list,
        description="Credentials by reference (HF_TOKEN, WANDB_API_KEY, ...): names of variables taken from the "
        "launching environment (EKS: a Kubernetes Secret); their values are never written anywhere.",
    )
    local: LocalSpec = Field(default_factory=LocalSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
    eks: EksSpec = Field(default_factory=EksSpec)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid environment variable name (letters, digits, _)")
        return v

    @model_validator(mode="before")
    @classmethod
    def _node_range(cls, data):
        """``nodes: "MIN:MAX"`` → nodes = MAX, min_nodes = MIN."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), str):
            return data
        text = data["nodes"].strip()
        if text.isdigit():
            return {**data, "nodes": int(text)}
        m = re.fullmatch(r"(\d+)\s*:\s*(\d+)", text)
        if m is None:
            raise ValueError(f"nodes {text!r}: write a node count (8) or a spare-node range MIN:MAX (8:10)")
        if data.get("min_nodes") is not None:
            raise ValueError(f"nodes {text!r} already sets min_nodes; drop min_nodes ({data['min_nodes']!r})")
        return {**data, "nodes": int(m.group(2)), "min_nodes": int(m.group(1))}

    @field_validator("exclude_nodes")
    @classmethod
    def _node_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _NODE_NAME.match(name):
                raise ValueError(f"'{name}' is not a node name (letters, digits, '.', '-', '_')")
        return v

    @property
    def secret_names(self) -> list[str]:
        return [s.name for s in self.secrets]

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def node_counts(self) -> range:
        """Every node count the job may train on: just ``nodes``, or MIN..MAX with spare nodes."""
        return range(self.min_nodes or self.nodes, self.nodes + 1)
