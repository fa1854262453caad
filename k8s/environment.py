"""A pod's environment: torchrun's rendezvous from the Kubeflow operators' ``PET_*`` variables, and the pod's
place in its job (PyTorchJob, TrainJob or Indexed Job).

Two contracts, both torchrun's own flags as ``PET_<FLAG>``: an elastic PyTorchJob (Training Operator v1.9) names a
rendezvous backend and endpoint (``PET_RDZV_*``), where each pod learns its rank; a TrainJob (Kubeflow Trainer v2's
torch plugin) numbers the nodes before anything starts (``PET_NODE_RANK``: the Indexed Job's completion index) and
names node 0 (``PET_MASTER_ADDR``/``PET_MASTER_PORT``), a static rendezvous, as a PyTorchJob without elasticPolicy
does too."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mtk.rendezvous import NodePlace, Rendezvous, RendezvousError, digits, index_var, int_var, staggered_c10d

if TYPE_CHECKING:
    from mtk.spec import Job


def rendezvous(job: Job, env: Mapping[str, str]) -> Rendezvous | None:
    """What the Kubeflow operator injects: elastic (PyTorchJob: etcd or c10d) or static (TrainJob, or a
    PyTorchJob without elasticPolicy: node rank and master address); None outside both (no ``PET_*`` variable)."""
    if not any(key.startswith("PET_") for key in env):
        return None
    procs = str(job.cluster.procs_per_node)
    nproc = env.get("PET_NPROC_PER_NODE") or procs
    node = env.get("HOSTNAME", "pod")
    if env.get("PET_RDZV_BACKEND") or env.get("PET_RDZV_ENDPOINT"):
        backend = env.get("PET_RDZV_BACKEND")
        endpoint = env.get("PET_RDZV_ENDPOINT")
        if not backend:
            raise RendezvousError("PET_RDZV_ENDPOINT is set but PET_RDZV_BACKEND is not")
        if not endpoint or ":" not in endpoint:
            raise RendezvousError(f"PET_RDZV_ENDPOINT={endpoint!r} must be HOST:PORT")
        nnodes = env.get("PET_NNODES")
        if not nnodes or not re.fullmatch(r"\d+(:\d+)?", nnodes):
            raise RendezvousError(f"PET_NNODES={nnodes!r} must be N or MIN:MAX")
        # mtk's PyTorchJob asks c10d joins to come one node index apart (its rdzvConf): torch's own c10d never
        # completes when a thousand agents join at once.
        backend, conf = staggered_c10d(backend, env.get("PET_RDZV_CONF", ""), env, "PET_RDZV_CONF")
        args = [
            "--nnodes",
            nnodes,
            "--nproc-per-node",
            nproc,
            "--rdzv-backend",
            backend,
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            env.get("PET_RDZV_ID") or job.name,
            "--max-restarts",
            env.get("PET_MAX_RESTARTS") or str(job.cluster.eks.max_restarts),
        ]
        if conf:
            args += ["--rdzv-conf", conf]
        return Rendezvous("kubeflow-elastic", args, node)
    nnodes = str(int_var(env, "PET_NNODES", 1))
    rank = int_var(env, "PET_NODE_RANK", 0)
    addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
    if not addr:
        raise RendezvousError("PET_MASTER_ADDR is not set (a TrainJob's, or a static PyTorchJob's, static "
                              "rendezvous needs it)")
    port = int_var(env, "PET_MASTER_PORT" if env.get("PET_MASTER_PORT") else "MASTER_PORT", 1)
    args = [
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        nproc,
        "--node-rank",
        str(rank),
        "--master-addr",
        addr,
        "--master-port",
        str(port),
    ]
    return Rendezvous("kubeflow-static", args, node)


def node_place(env: Mapping[str, str]) -> NodePlace | None:
    """A PyTorchJob's or TrainJob's pod (``PET_*``) or an Indexed Job's pod (``JOB_COMPLETION_INDEX``); None outside
    all. The node rank is known to a static rendezvous (a TrainJob's) only: an elastic PyTorchJob learns it at the
    rendezvous. Both operators start a container that exits non-zero again (a PyTorchJob in place; a TrainJob's
    JobSet restarts all its pods)."""
    pytorchjob = any(key.startswith("PET_") for key in env)
    if not pytorchjob and "JOB_COMPLETION_INDEX" not in env:
        return None
    elastic = bool(env.get("PET_RDZV_ENDPOINT"))
    return NodePlace(job_id=env.get("POD_NAME", ""), node_rank=None if elastic else digits(env, "PET_NODE_RANK"),
                     nnodes=digits(env, "PET_NNODES"), task_index=index_var(env, "JOB_COMPLETION_INDEX"),
                     restarts_failed_containers=pytorchjob)
