"""``cluster.eks``: the EKS backend's own block (namespace, FSx claim, placement, rendezvous, restarts, ...).

Registered in ``mtk.backends.OPTIONS`` and validated by the spec as ``cluster.eks``: the neutral core never names
these fields. A light module (pydantic only): every spec load imports it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from mtk.spec.base import Section

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


class EksOptions(Section):
    """Which Kubeflow operator runs training, and its pods' placement, storage and rendezvous."""

    operator: Literal["auto", "pytorchjob", "trainjob"] = Field(
        "auto", description="What runs the training pods: pytorchjob (Kubeflow Training Operator v1, AWS's "
        "reference: an elastic PyTorchJob, rendezvous c10d or etcd), trainjob (Kubeflow Trainer v2: a TrainJob on "
        "JobSet, a static rendezvous from the node numbering), or auto: `mtk launch` asks the API server and takes "
        "TrainJob where it is served, else PyTorchJob (rendezvous: etcd keeps PyTorchJob); render and dry run, "
        "which ask no cluster, render a PyTorchJob and say so.")
    namespace: str = "default"
    fsx_claim: str | None = Field("fsx-claim", description="PersistentVolumeClaim of the shared filesystem.")
    fsx_mount: str = Field("/fsx", description="Where the claim is mounted in every pod.")
    shm_size: str = Field("64Gi", description="Size of the memory-backed /dev/shm.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict] = Field(default_factory=list)
    service_account: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list, description="Secret names only; never values.")
    rendezvous: Literal["c10d", "etcd"] = Field(
        "c10d", description="PyTorchJob only (a TrainJob's rendezvous is static). How the worker pods meet: c10d "
        "(torch's TCPStore, hosted by worker 0's agent behind the run's rendezvous Service; no extra server and no "
        "etcd v2 API, which etcd 3.6 removed) or etcd (a per-run etcd with the v2 API, torchrun's etcd-v2 backend, "
        "as AWS's reference manifests do). "
        "benchmarks/scale_rendezvous.py measures both.")
    # By digest: a tag can be moved under a running fleet. The digest is the one another public deployment pins
    # for this tag (no registry is reachable where mtk is developed to re-check it); override to re-pin.
    etcd_image: str = Field(
        "quay.io/coreos/etcd:v3.5.17@sha256:a055da833a7c013b836ed0822e8ec1f99b059658be255ad8d0fcd31b635ae3d6",
        description="rendezvous: etcd: the rendezvous etcd (v2 API), pinned by digest.")
    hugepages: str | None = Field(
        "5120Mi", description="EFA jobs: hugepages-2Mi each worker requests (libfabric's EFA buffers; AWS's "
        "nccl-tests manifest asks 5120Mi); null leaves them out.")
    max_restarts: int = Field(3, ge=0, le=2**31 - 1, description="Restarts before the job fails: elastic restarts "
                              "(PyTorchJob), restarts of the whole JobSet (TrainJob).")
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
