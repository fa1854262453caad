"""What a job must say to run on EKS, checked before any cluster time (``EksBackend.validate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtk.spec.errors import Problem

if TYPE_CHECKING:
    from mtk.spec import Job


def problems(job: Job) -> list[Problem]:
    c, out = job.cluster, []
    if not job.image.registry:
        out.append(Problem("image.registry", "EKS pods pull the image from a registry: set image.registry "
                           "(e.g. <account>.dkr.ecr.<region>.amazonaws.com) and run `mtk build-image --push`"))
    e = c.eks
    if e.fsx_claim:
        for field, path in (("cluster.runs_dir", c.runs_dir), ("data.dir", job.data.dir)):
            if not path.startswith(e.fsx_mount.rstrip("/") + "/") and path != e.fsx_mount:
                out.append(Problem(field, f"must be under cluster.eks.fsx_mount ({e.fsx_mount}) so every "
                                   "pod sees it", path))
    if not e.fsx_claim and (job.data.fetch or job.data.corpus):
        # Each data Job would write into its own pod's disk, and the steps after it wait for files that never
        # appear on a volume they share.
        out.append(Problem("cluster.eks.fsx_claim", "the getdata/preprocess steps hand their files to training "
                           "through shared storage: set cluster.eks.fsx_claim to the shared filesystem's "
                           "PersistentVolumeClaim, or prepare the data beforehand and drop data.fetch/"
                           "data.corpus"))
    if e.min_nodes is not None and e.min_nodes != c.nodes:
        # A smaller world would start (torchrun --nnodes=min:max) and crash-loop in the engine's world-size
        # check: the parallel layout, batch split and exact resume are all fixed by nodes × procs_per_node.
        out.append(Problem("cluster.eks.min_nodes", f"elastic ranges are not supported: training needs exactly "
                           f"cluster.nodes ({c.nodes}) pods, and fewer would crash-loop on the world-size check; "
                           f"remove min_nodes or set it to {c.nodes} (a lost pod is replaced and the run "
                           "resumes from the last checkpoint)", e.min_nodes))
    if e.operator == "trainjob" and e.rendezvous == "etcd":
        # Kubeflow Trainer numbers the nodes (PET_NODE_RANK) and names the master (PET_MASTER_ADDR): no etcd is
        # rendered beside a TrainJob, so this setting would be silently ignored.
        out.append(Problem("cluster.eks.rendezvous", "a TrainJob's rendezvous is static (Kubeflow Trainer numbers "
                           "the nodes and names node 0 as the master): etcd is a PyTorchJob rendezvous; remove "
                           "rendezvous or set cluster.eks.operator: pytorchjob", e.rendezvous))
    return out
