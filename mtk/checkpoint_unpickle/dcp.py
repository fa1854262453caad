"""torch.distributed.checkpoint's dataclasses in a ``.metadata``, with the type of each field checked as it is built.

Every reader of a ``.metadata`` (torch's planner, megatron-core, mtk's precheck and reshard readers) takes its
fields for what they are declared: ``_StorageInfo.offset`` an int it seeks to, ``storage_data`` a dict of
``MetadataIndex``. Here each record is refused unless each field holds what torch writes there (the census tests
read every real one through these checks), so that an odd value is one line naming it, not a traceback deep in a
reader. Collections are checked whole when their record is built (a ``.metadata`` holds a hundred thousand chunks:
one pass each), and cannot change after (the machine seals what it nests).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .records import Check, Record

META = "torch.distributed.checkpoint.metadata"
PLAN = "torch.distributed.checkpoint.planner"
FS = "torch.distributed.checkpoint.filesystem"
MODULES = (META, PLAN, FS)


def _is(*kinds: Any) -> Check:
    return lambda v: type(v) in kinds


def _optional(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _list_of(*kinds: Any) -> Check:
    return lambda v: type(v) is list and all(type(x) in kinds for x in v)


def _dict_of(keys: Any, *values: Any) -> Check:
    return lambda v: type(v) is dict and all(type(k) is keys and type(x) in values for k, x in v.items())


def _anything(v: Any) -> bool:
    return True  # planner data: what the planner that saved it keeps (megatron-core: plain data), never read here


@functools.cache
def _fields() -> dict[str, dict[str, Check]]:
    """Each admitted DCP record's fields and their checks (torch 2.13's declarations, as real files hold them)."""
    import pathlib

    import torch
    from torch.distributed.checkpoint import filesystem as fs
    from torch.distributed.checkpoint import metadata as meta
    from torch.distributed.checkpoint import planner as plan

    size, text, props = _is(torch.Size), _is(str), _is(meta.TensorProperties)
    chunk = _is(meta.ChunkStorageMetadata)
    return {
        f"{FS}._StorageInfo": {"relative_path": text, "offset": _count, "length": _count,
                               "transform_descriptors": _optional(_list_of(str))},
        f"{FS}._StoragePrefix": {"prefix": text},
        f"{META}.MetadataIndex": {"fqn": text, "offset": _optional(size), "index": _optional(_count)},
        f"{META}.ChunkStorageMetadata": {"offsets": size, "sizes": size},
        f"{META}.TensorStorageMetadata": {"properties": props, "size": size,
                                          "chunks": _list_of(meta.ChunkStorageMetadata)},
        f"{META}.BytesStorageMetadata": {},
        f"{META}.StorageMeta": {"checkpoint_id": _optional(_is(str, pathlib.PosixPath)), "save_id": _optional(text),
                                "load_id": _optional(text), "modules": _list_of(str)},
        f"{META}.Metadata": {
            "state_dict_metadata": _dict_of(str, meta.TensorStorageMetadata, meta.BytesStorageMetadata),
            "planner_data": _anything, "storage_data": _dict_of(meta.MetadataIndex, fs._StorageInfo),
            "storage_meta": _optional(_is(meta.StorageMeta)), "version": _optional(text),
            # megatron-core keeps each rank's save plan on the Metadata once it reuses a save's plans
            # (train.checkpoint.assume_constant_structure / Megatron-LM's --ckpt-assume-constant-structure)
            "all_local_plans": _list_of(plan.SavePlan)},
        f"{PLAN}.SavePlan": {"items": _list_of(plan.WriteItem), "storage_data": _optional(_is(fs._StoragePrefix)),
                             "planner_data": _anything, "usable": _is(bool)},
        f"{PLAN}.WriteItem": {"index": _is(meta.MetadataIndex), "type": _is(plan.WriteItemType),
                              "bytes_io_data": _is(type(None)), "tensor_data": _optional(_is(plan.TensorWriteData))},
        f"{PLAN}.TensorWriteData": {"chunk": chunk, "properties": props, "size": size},
    }


def _tensor_props_state(state: Any) -> bool:
    import torch
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

    return (type(state) is tuple and len(state) == 5 and isinstance(state[0], torch.dtype)
            and isinstance(state[1], torch.layout) and type(state[2]) is bool
            and type(state[3]) is _MEM_FORMAT_ENCODING and type(state[4]) is bool)


def record(module: str, name: str) -> Record:
    """The rule for one of DCP's dataclasses."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    dotted = f"{module}.{name}"
    if name == "TensorProperties":
        return Record(dotted, cls, setstate=cls.__setstate__, state_check=_tensor_props_state)
    fields = _fields()[dotted]
    # a field with a class-level default reads as that default when a file leaves it out; the others must be there
    required = frozenset(f.name for f in dataclasses.fields(cls) if not hasattr(cls, f.name)) & fields.keys()
    return Record(dotted, cls, fields=fields, required=required, key=name == "MetadataIndex")
