"""Whether a checkpoint save may reuse the save plans cached from an earlier save
(``train.checkpoint.assume_constant_structure``).

megatron-core's cached plans say which shards each rank writes: keys, shapes, dtypes, offsets, which replica
writes. Reused for a state dict of another structure they write the old one and never say so: a tensor added
since is missing from ``.metadata`` (the checkpoint does not load), a changed shape or dtype is recorded as the
stale one, a removed tensor fails the save. A run's state dict does change between saves: the distributed
optimizer writes only ``param`` until Adam's state exists (a save before the first optimizer step, or after
fp16's loss scaler skipped the first steps), and a feature may add state mid-run.

So before a save reuses the plans, every rank compares its state dict's structure with the one the plans were
made from: a walk over its own shards' metadata, no tensor data, no communication, proportional to its shard
count. The ranks then agree in one all-reduce (the lowest rank whose structure changed, or none): a plan is
global, so one rank's change makes every rank plan anew and the sharding is checked again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

FIELDS_SHOWN = 3  # names listed per kind of change in the log line


class Shard(NamedTuple):
    """What a save plan is made from for one shard of this rank (no data)."""

    key: str
    kind: str  # "tensor" or "object"
    dtype: str
    global_shape: tuple
    local_shape: tuple
    global_offset: tuple
    fragments: tuple | None
    replica: Any
    prepend_axis_num: int
    flattened: tuple | None


def structure(sharded_state_dict: dict) -> list[Shard]:
    """This rank's shards in the state dict's order (factories must be applied: what they build is saved)."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    out: list[Shard] = []
    for v in nested_values(sharded_state_dict):
        if isinstance(v, ShardedTensor):
            flat = v.flattened_range
            out.append(Shard(v.key, "tensor", str(v.dtype), tuple(v.global_shape), tuple(v.local_shape),
                             tuple(v.global_offset),
                             None if v.axis_fragmentations is None else tuple(v.axis_fragmentations),
                             v.replica_id, v.prepend_axis_num, None if flat is None else (flat.start, flat.stop)))
        elif isinstance(v, ShardedObject):
            out.append(Shard(v.key, "object", "", tuple(v.global_shape), (), tuple(v.global_offset), None,
                             v.replica_id, 0, None))
    return out


def difference(before: list[Shard], after: list[Shard]) -> str:
    """What changed between two structures, in a few words: keys added, removed, and the first field that changed."""
    old: dict[str, list[Shard]] = {}
    new: dict[str, list[Shard]] = {}
    for shard in before:
        old.setdefault(shard.key, []).append(shard)
    for shard in after:
        new.setdefault(shard.key, []).append(shard)
    added = [k for k in new if k not in old]
    removed = [k for k in old if k not in new]
    changed = [f"{k}: {_field_change(old[k], new[k])}" for k in new if k in old and old[k] != new[k]]
    parts = [f"{what} {_some(names)}" for what, names in (("added", added), ("removed", removed),
                                                          ("changed", changed)) if names]
    return "; ".join(parts) or "the shards' order"


def _field_change(old: list[Shard], new: list[Shard]) -> str:
    if len(old) != len(new):
        return f"{len(old)} → {len(new)} shards"
    for a, b in zip(old, new, strict=True):
        for name, x, y in zip(Shard._fields, a, b, strict=True):
            if x != y:
                return f"{name} {_show(x)} → {_show(y)}"
    return "order"


def _show(value: Any) -> str:
    if isinstance(value, tuple) and all(isinstance(x, int) for x in value):
        return "x".join(map(str, value)) or "()"
    return str(value).removeprefix("torch.")


def _some(names: list[str]) -> str:
    more = len(names) - FIELDS_SHOWN
    return ", ".join(names[:FIELDS_SHOWN]) + (f" and {more} more" if more > 0 else "")


class StructureCheck:
    """The structure the cached plans were made from, and the check a save runs before it reuses them."""

    def __init__(self) -> None:
        self.planned: list[Shard] | None = None

    def changed(self, sharded_state_dict: dict) -> str | None:
        """None when the cached plans fit this save's state dict on every rank; else the one line that says what
        changed (collective when plans are cached: every rank calls it for every save)."""
        current = structure(sharded_state_dict)
        before, self.planned = self.planned, current
        if before is None:
            return None
        differs = current != before
        first = first_rank_that(differs)
        if first is None:
            return None
        where = (f"on rank {first}: {difference(before, current)}" if differs and first == _rank()
                 else f"on rank {first}")
        return f"the state dict changed since the save plans were cached ({where})"


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def first_rank_that(here: bool) -> int | None:
    """The lowest rank for which ``here`` holds, or None: one all-reduce of one number over every rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    flag = torch.tensor([float(dist.get_rank() if here else world)], device=torch.cuda.current_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    first = int(flag.item())
    return None if first >= world else first
