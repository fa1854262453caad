"""torch.distributed + megatron.core parallel_state initialisation (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

from mtk import megatron_flags

if TYPE_CHECKING:
    from mtk.spec import Job


def init(job: Job, cpu: bool) -> None:
    """Join the process group torchrun set up and build the tp/pp/cp/ep/dp groups.

    Every group gets ``cluster.pg_timeout_s``.

    Sizes come from the job spec; the world size comes from torchrun (``WORLD_SIZE``), and a mismatch
    with ``cluster.nodes × procs_per_node`` is an error naming both, because every later figure
    (data-parallel size, batch arithmetic) would silently be wrong.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    timeout_s = job.cluster.pg_timeout_s
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != job.cluster.world_size:
        raise RuntimeError(f"torchrun started {world} processes but the job spec says cluster.nodes × "
                           f"procs_per_node = {job.cluster.world_size}; launch with the spec's sizes")
    if not dist.is_initialized():
        if not cpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="gloo" if cpu else "nccl", timeout=timedelta(seconds=timeout_s))
    # tp/pp/vpp/cp/ep and the groups' timeout (cluster.pg_timeout_s in whole minutes): the flag table's
    ps.initialize_model_parallel(**megatron_flags.core_kwargs(job, megatron_flags.GROUPS),
                                 create_gloo_process_groups=True)
    seed(job.train.seed, cpu)


def seed(value: int, cpu: bool) -> None:
    """Seed python, numpy, torch and megatron's model-parallel RNG tracker (per pp rank, as Megatron does).

    On CPU the tracker is created with ``inference_rng_tracker=True`` so no CUDA RNG is touched; dropout is
    then not forked per TP rank (the tiny CPU presets use no dropout).
    """
    import random

    import numpy as np
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    value = value + 100 * ps.get_pipeline_model_parallel_rank()
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)
    if cpu:
        tensor_parallel.model_parallel_cuda_manual_seed(value, inference_rng_tracker=True)
    else:
        tensor_parallel.model_parallel_cuda_manual_seed(value)


def shutdown() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
