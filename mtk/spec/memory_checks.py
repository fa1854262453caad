"""Does the per-GPU estimate fit the GPU? ``mtk validate`` refuses a spec whose weights + grads + optimizer state +
activations (:mod:`mtk.figures`) exceed one GPU's memory: such a job would queue for hours and then die
with an out-of-memory error on its first step. The GPU's memory comes from ``cluster.gpu_memory_gib`` or
``cluster.instance_type``; without either the estimate is printed but not judged. ``cluster.allow_memory_overcommit``
accepts it anyway (a layout the estimate over-counts).

The estimate leaves out the CUDA context, NCCL buffers and allocator fragmentation (a few GiB): a spec just under
the line may still run out of memory, one over it cannot fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import check
from .errors import Problem

if TYPE_CHECKING:
    from .job import Job

# Memory of one GPU as its driver reports it (nvidia-smi's total, in GiB), by EC2 instance family.
GPU_GIB_BY_FAMILY: dict[str, tuple[float, str]] = {
    "p5": (79.6, "H100 80GB"),
    "p5e": (140.4, "H200 141GB"),
    "p5en": (140.4, "H200 141GB"),
    "p4d": (40.0, "A100 40GB"),
    "p4de": (80.0, "A100 80GB"),
    "p6-b200": (179.1, "B200 180GB"),
    "g5": (22.5, "A10G 24GB"),
    "g6": (22.5, "L4 24GB"),
    "g6e": (45.0, "L40S 48GB"),
    "p3": (16.0, "V100 16GB"),
    "p3dn": (32.0, "V100 32GB"),
    "g4dn": (15.0, "T4 16GB"),
}


def gpu_memory(job: Job) -> tuple[float, str] | None:
    """(GiB of one GPU, where that figure came from), or None when neither field says."""
    c = job.cluster
    if c.gpu_memory_gib is not None:
        return c.gpu_memory_gib, "cluster.gpu_memory_gib"
    family = (c.instance_type or "").split(".")[0]
    if family in GPU_GIB_BY_FAMILY:
        gib, gpu = GPU_GIB_BY_FAMILY[family]
        return gib, f"{c.instance_type}: {gpu}"
    return None


def estimate_gib(job: Job, parameters_per_rank: int | None = None) -> tuple[float, float, float]:
    """(total, weights+grads+optimizer, activations) per GPU, with the optimizer layout the spec uses."""
    from mtk.figures import compute

    f = compute(job, parameters_per_rank)
    state = f.gib_per_gpu_distributed_optimizer if job.parallel.distributed_optimizer else f.gib_per_gpu
    return round(state + f.activation_gib_per_gpu, 2), state, f.activation_gib_per_gpu


def levers(job: Job) -> list[str]:
    """What lowers the estimate, for the refusal: only the levers this spec has not pulled yet."""
    from mtk.figures import compute

    p, t, out = job.parallel, job.train, []
    if not p.distributed_optimizer:
        dist = compute(job).gib_per_gpu_distributed_optimizer
        out.append(f"parallel.distributed_optimizer: true (optimizer state sharded over data-parallel ranks: {dist} "
                   "GiB of weights+grads+optimizer)")
    out.append(f"a larger parallel.tp (now {p.tp}, within a node) or parallel.pp (now {p.pp})")
    if t.recompute != "full":
        out.append(f"train.recompute: full (now {t.recompute})")
    if t.micro_batch_size > 1:
        out.append(f"a smaller train.micro_batch_size (now {t.micro_batch_size})")
    return out


@check
def memory_fits_the_gpu(job: Job, backend) -> list[Problem]:
    if job.cluster.device != "gpu" or job.cluster.allow_memory_overcommit:
        return []
    known = gpu_memory(job)
    if known is None:
        return []
    gib, source = known
    try:
        total, state, activations = estimate_gib(job)
    except (ZeroDivisionError, ValueError):  # parallel sizes that do not divide: reported by their own checks
        return []
    if total <= gib:
        return []
    field = "cluster.gpu_memory_gib" if job.cluster.gpu_memory_gib is not None else "cluster.instance_type"
    return [Problem(field, f"the estimate per GPU is {total} GiB (weights+grads+optimizer {state} + activations "
                    f"{activations}), over the {gib} GiB of one GPU ({source}); lower it with "
                    f"{'; '.join(levers(job))} — or set cluster.allow_memory_overcommit: true to launch anyway",
                    getattr(job.cluster, field.split(".")[1]))]
