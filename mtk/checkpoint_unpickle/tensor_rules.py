"""The rules for tensors, shapes and numpy arrays: what a checkpoint's tensor rebuilds, ``torch.Size`` and the RNG
state's numpy arrays may be given, checked before any of it reaches torch or numpy.

A shape is bounded before it is multiplied (at most :data:`~.base.MAX_RANK` dimensions, each below 2**63:
``math.prod`` of a hundred thousand copies of 2**62 would take minutes), a tensor view never claims more
elements than its storage holds past its offset (a stride-0 view of 2**30 elements over one byte would be
materialised by the first ``.contiguous()``), and an array's bytes are exactly its shape's.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from .base import MAX_RANK, Builder, Callee, Damaged, Refused, Token, shown
from .torch_file import read_legacy_storage
from .values import Hollow, Storage

INT64_MAX = (1 << 63) - 1


def _dims(shape: Any, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of sizes, refused unless at most MAX_RANK ints in torch's range (so that multiplying them
    costs nothing: the product of a hundred thousand copies of 2**62 would take minutes)."""
    if type(shape) is not tuple and not _is_size(shape):
        raise Refused(f"{what} with a shape that is a {type(shape).__name__}")
    if len(shape) > MAX_RANK:
        raise Refused(f"{what} of {len(shape)} dimensions (at most {MAX_RANK})")
    if not all(type(x) is int and 0 <= x <= INT64_MAX for x in shape):
        raise Refused(f"{what} of shape {shown(tuple(shape))} (each size a whole number below 2**63)")
    return tuple(shape)


def _is_size(v: Any) -> bool:
    import torch

    return type(v) is torch.Size


def size(args: tuple, machine: Builder) -> Any:
    """``torch.Size((...))``: a shape in DCP's metadata, a tensor's size in a plain pickle."""
    import torch

    if len(args) != 1 or type(args[0]) is not tuple:
        raise Refused("REDUCE calling torch.Size with other than a tuple of sizes")
    dims = _dims(args[0], "a torch.Size")
    machine.charge(len(dims), "torch.Size")
    return torch.Size(dims)


class RebuildTensor(Callee):
    """``torch._utils._rebuild_tensor_v2`` (and v3, which names the dtype: fp8 and the other dtypes without a
    storage class). The view must lie inside its storage (torch would grow the storage instead, reading memory the
    file never held) and hold no more elements than the storage has past its offset; no backward hooks, no
    metadata."""

    def __init__(self, name: str, v3: bool) -> None:
        self.name, self.v3 = name, v3

    def reduce(self, args: tuple, machine: Builder) -> Any:
        import torch

        n = 7 if self.v3 else 6
        if len(args) not in (n, n + 1):
            raise Refused(f"REDUCE calling {self.name} with {len(args)} arguments")
        storage, offset, shape, stride, requires_grad, hooks = args[:6]
        dtype: Any = args[6] if self.v3 else None
        extra = args[n] if len(args) > n else None
        ok = (isinstance(storage, Storage) and type(offset) is int and offset >= 0 and type(requires_grad) is bool
              and type(hooks) is OrderedDict and not hooks and (extra is None or (type(extra) is dict and not extra))
              and (not self.v3 or isinstance(dtype, torch.dtype)))
        if not ok:
            raise Refused(f"REDUCE calling {self.name} with arguments a saved tensor never has")
        if self.v3:
            if storage.dtype != torch.uint8:
                raise Refused(f"{self.name} on a typed storage (it names the dtype of an untyped one)")
            elements = storage.numel // dtype.itemsize
        else:
            elements = storage.numel
        sizes = _dims(shape, "a tensor")
        strides = _dims(stride, "a tensor's strides")
        if len(sizes) != len(strides):
            raise Refused(f"{self.name} with {len(sizes)} sizes and {len(strides)} strides")
        count = math.prod(sizes)
        if count and offset + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) >= elements:
            raise Damaged(f"a tensor of size {sizes} at offset {offset} lies outside its storage of {elements} "
                          "elements")
        if count > elements - offset:
            raise Refused(f"a tensor view of {count} elements over a storage of {elements} from offset {offset} (its "
                          "strides repeat elements; a checkpoint's tensors never do)")
        if storage.typed is None:
            return Hollow()
        if self.v3:
            return torch._utils._rebuild_tensor_v3(storage.typed, offset, sizes, strides, requires_grad,
                                                   OrderedDict(), dtype)
        return torch._utils._rebuild_tensor_v2(storage.typed, offset, sizes, strides, requires_grad, OrderedDict())


class LoadFromBytes(Callee):
    """``torch.storage._load_from_bytes`` (or megatron-core's replacement): how a plain pickle of a tensor holds its
    storage (a nested torch file in the pre-zip format); read by mtk's reader, never ``torch.load``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def reduce(self, args: tuple, machine: Builder) -> Any:
        if len(args) != 1 or type(args[0]) is not bytes:
            raise Refused(f"REDUCE calling {self.name} with other than bytes")
        machine.charge(len(args[0]), "storages")
        return read_legacy_storage(args[0], hollow=machine.hollow)


# numpy: the RNG state's arrays. Only plain numeric dtypes in their canonical state; never an object dtype, never a
# dtype state the file writes (its flags decide whether numpy reads the bytes as PyObject pointers).
NUMPY_CODES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"})


class Dtype(Callee):
    name = "numpy.dtype"

    def reduce(self, args: tuple, machine: Builder) -> Any:
        import numpy

        ok = (len(args) == 3 and type(args[0]) is str and args[0] in NUMPY_CODES and args[1] is False
              and args[2] is True)
        if not ok:
            raise Refused(f"numpy.dtype{shown(args)} (only a plain numeric dtype)")
        return machine.made(numpy.dtype(args[0]), self)

    def build(self, obj: Any, state: Any, machine: Builder) -> None:
        canonical = obj.__reduce__()[2]  # the state numpy itself saves for this dtype: nothing to change
        if type(state) is not tuple or len(state) != len(canonical) or state != canonical:
            raise Refused(f"BUILD on numpy.dtype('{obj.str}') with a state numpy never saves for it (its flags "
                          "decide how numpy reads an array's bytes)")


class Reconstruct(Callee):
    """``numpy._core.multiarray._reconstruct(ndarray, (0,), b'b')`` then BUILD with the array's state."""

    def __init__(self, name: str, ndarray: Token) -> None:
        self.name, self.ndarray = name, ndarray

    def reduce(self, args: tuple, machine: Builder) -> Any:
        import numpy

        ok = (len(args) == 3 and args[0] is self.ndarray and type(args[1]) is tuple and len(args[1]) == 1
              and type(args[1][0]) is int and args[1][0] == 0 and type(args[2]) is bytes and args[2] == b"b")
        if not ok:
            raise Refused(f"REDUCE calling {self.name} with other than (numpy.ndarray, (0,), b'b')")
        return machine.made(numpy.ndarray((0,), dtype="b"), self)

    def build(self, obj: Any, state: Any, machine: Builder) -> None:
        import numpy

        ok = (type(state) is tuple and len(state) == 5 and type(state[0]) is int and state[0] == 1
              and isinstance(state[2], numpy.dtype) and not state[2].hasobject and state[2].kind in "biufc"
              and type(state[3]) is bool and type(state[4]) is bytes)
        if not ok:
            raise Refused("BUILD on a numpy.ndarray with a state other than a plain numeric array's bytes")
        raw = state[4]
        shape = _dims(state[1], "a numpy array")
        if math.prod(shape) * state[2].itemsize != len(raw):
            raise Damaged(f"a numpy array of shape {shape} holds {len(raw)} bytes")
        machine.charge(len(raw) + len(shape), "numpy arrays")
        obj.__setstate__((1, shape, state[2], state[3], raw))
