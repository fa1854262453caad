"""Make the ranks' checkpoint reads admit only the globals real checkpoints hold.

megatron-core 0.19.2 reads a checkpoint's common state and every ShardedObject (rng_state, the rerun state,
optimizer bookkeeping) through torch DCP's load planner, whose ``load_bytes`` unpickles with
``torch.load(weights_only=False)``: megatron-core's own ``weights_only=True`` applies only to what that first
load returns, so a common state that reduces to ``os.system`` runs on every rank (measured: a crafted
checkpoint runs its command inside ``dist_checkpointing.load_common_state_dict``). DCP also reads ``.metadata``
with plain ``pickle.load``. :func:`install` routes both through :mod:`mtk.checkpoint_unpickle` for the whole
process: a resume, ``train.init_from``, ``mtk convert`` and the Megatron-LM/HF interop all read through it.
"""

from __future__ import annotations

from typing import Any

from mtk import checkpoint_unpickle

_SOURCE = "_mtk_source"  # the checkpoint dir, kept on the Metadata a reader returns, for the refusal's message


def _read_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
    """FileSystemReader.read_metadata (torch 2.13), its pickle.load restricted."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    path = self._get_metadata_path(kwargs.get("rank"))
    with self.fs.create_stream(path, "rb") as fh:
        metadata = checkpoint_unpickle.load_metadata(fh, str(path))
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = self.load_id
    setattr(metadata, _SOURCE, str(self.path))
    return metadata


def _load_bytes(self: Any, read_item: Any, value: Any) -> None:
    """DefaultLoadPlanner.load_bytes (torch 2.13), its torch.load restricted; megatron's classes are the real ones
    (the ranks have imported megatron)."""
    from torch.distributed.checkpoint._traverse import set_element

    fqn = read_item.dest_index.fqn
    where = getattr(getattr(self, "metadata", None), _SOURCE, None) or "the checkpoint"
    what = "common state" if fqn.startswith("common_state") else fqn.split("/")[0]
    obj = checkpoint_unpickle.load_torch(value, where, what, megatron_real=True)
    if self.flatten_state_dict:
        set_element(self.original_state_dict, self.mappings[fqn], obj)
    else:
        self.state_dict[fqn] = obj


def install() -> None:
    """Restrict DCP's two unpicklers in this process (idempotent)."""
    from torch.distributed.checkpoint import default_planner, filesystem

    filesystem.FileSystemReader.read_metadata = _read_metadata  # type: ignore[method-assign]
    default_planner.DefaultLoadPlanner.load_bytes = _load_bytes  # type: ignore[method-assign]
