"""The shard plan of a corpus, and which shards an array task owns: contiguous runs of the plan, balanced by
bytes, fixed by the plan alone.

Task ``i`` of ``n`` (a Slurm array index, an EKS Indexed Job's completion index) owns the shards whose byte
midpoint falls in the i-th n-th of the corpus. Contiguous slices keep each task's reads sequential, and since
every task computes the same plan from the same inputs, no coordination is needed to agree on the split.
"""

from __future__ import annotations

import os

from . import sources
from .corpus import Shard, compression, is_parquet
from .parquet import row_group_bytes, row_group_ranges


def plan_shards(files: list[str], shard_bytes: int) -> list[Shard]:
    """Deterministic shards for ``files``: the same inputs always give the same plan."""
    shards: list[Shard] = []
    for path in files:
        if is_parquet(path):
            for a, b in row_group_ranges(path, shard_bytes):
                shards.append(Shard(len(shards), path, a, b, row_group_bytes(path, a, b)))
            continue
        size = sources.size(path)
        if compression(path) or size <= shard_bytes:
            shards.append(Shard(len(shards), path, 0, -1, size))
            continue
        for start in range(0, size, shard_bytes):
            end = start + shard_bytes
            shards.append(Shard(len(shards), path, start, -1 if end >= size else end, min(end, size) - start))
    return shards


def owner(shards: list[Shard], tasks: int) -> dict[int, int]:
    """shard index -> task index for every shard of the plan."""
    total = sum(s.nbytes for s in shards)
    out: dict[int, int] = {}
    acc = 0
    for pos, s in enumerate(shards):
        if total > 0:
            mid = acc + s.nbytes / 2
            out[s.index] = min(tasks - 1, int(tasks * mid / total))
        else:
            out[s.index] = min(tasks - 1, pos * tasks // max(1, len(shards)))
        acc += s.nbytes
    return out


def task_shards(shards: list[Shard], tasks: int, index: int) -> list[Shard]:
    """The shards task ``index`` of ``tasks`` owns, in plan order (one pass over the plan)."""
    own = owner(shards, tasks)
    return [s for s in shards if own[s.index] == index]


def index_from_env() -> int | None:
    """The task index the scheduler gave this process (a Slurm array task, a Kubernetes Indexed Job), if any."""
    from mtk.rendezvous import node_place

    return node_place(os.environ).task_index
