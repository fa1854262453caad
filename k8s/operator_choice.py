"""Which Kubeflow operator runs a run's training: ``cluster.eks.operator``, and for ``auto`` what the cluster serves.

PyTorchJob (Training Operator v1, ``kubeflow.org/v1``) is AWS's reference and the only one with an etcd or c10d
rendezvous; TrainJob (Kubeflow Trainer v2, ``trainer.kubeflow.org/v1alpha1``) is its maintained successor, with a
static rendezvous from JobSet's node numbering. ``auto`` takes TrainJob where the cluster serves it, unless the spec
asks for etcd; a render without a cluster (``mtk render``, ``--dry-run``) cannot ask, renders a PyTorchJob and says
so. Pure: the caller asks the API server (:meth:`k8s.client.Kube.served_operators`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .manifests import PYTORCHJOB, TRAINJOB

if TYPE_CHECKING:
    from mtk.spec import Job

# What each operator needs the API server to serve: (group/version, resources).
SERVES: dict[str, tuple[str, frozenset[str]]] = {
    PYTORCHJOB: ("kubeflow.org/v1", frozenset({"pytorchjobs"})),
    TRAINJOB: ("trainer.kubeflow.org/v1alpha1", frozenset({"trainjobs", "trainingruntimes"})),
}
WHAT = {PYTORCHJOB: "PyTorchJob (kubeflow.org/v1: Kubeflow Training Operator v1.9)",
        TRAINJOB: "TrainJob + TrainingRuntime (trainer.kubeflow.org/v1alpha1: Kubeflow Trainer v2, with JobSet)"}


def choose(job: Job, served: frozenset[str] | None) -> tuple[str, str]:
    """(operator, a note for the user, "" when there is nothing to say). ``served``: the operators the API server
    serves, None when no cluster was asked."""
    e = job.cluster.eks
    if e.operator != "auto":
        return e.operator, ""
    if served is None:
        return PYTORCHJOB, ("cluster.eks.operator is auto and no cluster was asked: rendered a PyTorchJob; `mtk "
                            "launch` asks the API server and submits a TrainJob where Kubeflow Trainer v2 is served "
                            "(set cluster.eks.operator to render one here)")
    if e.rendezvous == "etcd" and PYTORCHJOB in served:
        return PYTORCHJOB, "cluster.eks.operator auto: a PyTorchJob, the operator with the etcd rendezvous asked"
    if TRAINJOB in served:
        return TRAINJOB, "cluster.eks.operator auto: the cluster serves Kubeflow Trainer v2, so a TrainJob"
    if PYTORCHJOB in served:
        return PYTORCHJOB, "cluster.eks.operator auto: the cluster serves Training Operator v1 only, so a PyTorchJob"
    return PYTORCHJOB, ""  # neither: launch_problems has refused already


def unserved(job: Job, served: frozenset[str]) -> str | None:
    """Why this job cannot run on a cluster serving ``served`` (None when it can), before anything is applied."""
    e = job.cluster.eks
    if e.operator == "auto":
        if served & {PYTORCHJOB, TRAINJOB}:
            if e.rendezvous == "etcd" and PYTORCHJOB not in served:
                return (f"rendezvous: etcd needs a {WHAT[PYTORCHJOB]}, and this cluster serves only Kubeflow Trainer "
                        "v2: remove cluster.eks.rendezvous (a TrainJob's rendezvous is static)")
            return None
        return (f"the cluster serves neither a {WHAT[PYTORCHJOB]} nor a {WHAT[TRAINJOB]}: install one of them, or "
                "point KUBECONFIG at the cluster that has it")
    if e.operator in served:
        return None
    other = TRAINJOB if e.operator == PYTORCHJOB else PYTORCHJOB
    hint = f"; this cluster serves {other}: set cluster.eks.operator: {other} or auto" if other in served else ""
    return f"cluster.eks.operator is {e.operator}, and the cluster does not serve a {WHAT[e.operator]}{hint}"
