"""What each kind of checkpoint pickle may name, and how the machine builds each thing it names.

A rule is a :class:`~.machine.Callee` (or a plain value such as a dtype): it accepts only the arguments and states
real checkpoints give it, checked before any of them reaches a constructor, and builds the object itself. Nothing
here imports a module by a name the file gives; megatron's and TransformerEngine's classes are the real ones only
where the caller asks for them (the ranks) and can import them, inert stand-ins otherwise (the launch side).

The pairs are the ones real checkpoints hold, recorded with ``pickletools`` from mtk's own checkpoints of every
layout the tests write and from Megatron-LM's (``tests/unit/launcher/test_ckpt_refuses_code.py`` and
``tests/integration/launcher/test_checkpoint_refuses_code.py`` keep each census inside them), plus the families
that vary with the run (a tensor's dtype and storage type) and TransformerEngine's FP8 recipe classes in a module's
``_extra_state``. Left out although megatron-core registers them for its own ``weights_only`` loads: classes whose
state reaches native code (``torch._C.Generator``, ``io.BytesIO``, ``numpy.dtypes.UInt32DType``) and ones no
checkpoint holds (``types.SimpleNamespace``, megatron's ``OptimizerConfig``).
"""

from __future__ import annotations

import functools
import importlib
import math
import warnings
from collections import OrderedDict
from typing import Any

from .machine import Callee, Damaged, Machine, Refused


# -- stand-ins for megatron's and TransformerEngine's classes where they are not imported -------------------------
class Inert:
    """Stands in for a class of megatron's (or TransformerEngine's): holds the state, runs nothing."""

    def __repr__(self) -> str:
        return f"<inert {type(self).__module__}.{type(self).__qualname__}>"


class InertEnum:
    """Stands in for a member of an enum of megatron's: its class name and value."""

    def __init__(self, qualname: str, value: Any) -> None:
        self.qualname, self.value = qualname, value

    def __repr__(self) -> str:
        return f"<inert {self.qualname}: {self.value!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InertEnum) and (self.qualname, self.value) == (other.qualname, other.value)

    def __hash__(self) -> int:
        return hash((self.qualname, self.value))


def _import(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _real_or_none(module: str, name: str, real: bool) -> Any:
    """The class itself when ``real`` and importable; None (an inert stand-in) otherwise."""
    if not real:
        return None
    try:
        return _import(module, name)
    except (ImportError, AttributeError):
        return None


# -- argument checks --------------------------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return type(v) is int


def _ints(v: Any, low: int = 0) -> bool:
    return type(v) is tuple and all(_is_int(x) and x >= low for x in v)


_PLAIN = (str, int, float, bool, type(None))


def _plain(v: Any) -> bool:
    return type(v) in _PLAIN or (type(v) is tuple and all(type(x) in _PLAIN for x in v))


def _attrs(state: Any, what: str) -> dict[str, Any]:
    """A BUILD state that only sets attributes: a dict of attribute names, no dunders. (Not only declared fields:
    megatron-core keeps ``all_local_plans`` on DCP's Metadata.) The values are what the machine made: data."""
    if type(state) is not dict:
        raise Refused(f"BUILD on a {what} with a {type(state).__name__} state (only a dict of attributes)")
    for key in state:
        if type(key) is not str or key.startswith("__"):
            raise Refused(f"BUILD on a {what} setting {key!r}")
    return state


# -- the rule kinds ---------------------------------------------------------------------------------------------
class Token(Callee):
    """A global that is only ever an argument (``numpy.ndarray`` for ``_reconstruct``, a storage type in a
    persistent id): calling or building it is refused by the Callee defaults."""

    def __init__(self, name: str) -> None:
        self.name = name


class StorageKind(Token):
    """``torch.FloatStorage`` & co. in a persistent id: names the storage's dtype; never called."""

    def __init__(self, name: str, dtype: Any) -> None:
        super().__init__(name)
        self.dtype = dtype


class Record(Callee):
    """A plain class rebuilt as pickle's default protocol does (NEWOBJ with no arguments, then BUILD with a dict
    of its attributes): ``argparse.Namespace``, DCP's dataclasses, megatron's config dataclasses. ``setstate``: the
    class's own pure-Python ``__setstate__`` when it has one (DCP's TensorProperties), after ``state_check``."""

    def __init__(self, name: str, cls: type | None, setstate: Any = None, state_check: Any = None) -> None:
        self.name = name
        if cls is None:
            module, _, qual = name.rpartition(".")
            cls = type(qual, (Inert,), {"__module__": module, "__qualname__": qual})
        elif cls.__new__ is not object.__new__:
            raise TypeError(f"{name} is not a plain class")  # a rule table mistake, never a file's
        self.cls = cls
        self.setstate, self.state_check = setstate, state_check

    def newobj(self, args: tuple, machine: Machine) -> Any:
        if args:
            raise Refused(f"NEWOBJ of {self.name} with arguments (it is rebuilt from its state)")
        return machine.made(object.__new__(self.cls), self)

    def build(self, obj: Any, state: Any, machine: Machine) -> None:
        if self.setstate is not None:
            if not self.state_check(state):
                raise Refused(f"BUILD on a {self.name} with a state it never saves")
            self.setstate(obj, state)
            return
        obj.__dict__.update(_attrs(state, self.name))


class Enumerated(Callee):
    """An enum member rebuilt by value (REDUCE of the class on one plain value): a lookup, nothing runs."""

    def __init__(self, name: str, cls: Any) -> None:
        self.name, self.cls = name, cls

    def reduce(self, args: tuple, machine: Machine) -> Any:
        value = args[0] if len(args) == 1 else None
        named_tuple = isinstance(value, tuple) and all(type(x) in _PLAIN for x in value)  # TE's Format values
        if len(args) != 1 or not (_plain(value) or named_tuple):
            raise Refused(f"REDUCE calling {self.name} with other than one plain value")
        if self.cls is None:
            return InertEnum(self.name, args[0])
        try:
            return self.cls(args[0])
        except ValueError:
            raise Damaged(f"{args[0]!r} is not a member of {self.name}") from None


class NamedTuple(Callee):
    """A namedtuple of plain values (NEWOBJ with its fields): TransformerEngine's ``_FormatHelper``."""

    def __init__(self, name: str, cls: Any) -> None:
        self.name, self.cls = name, cls

    def newobj(self, args: tuple, machine: Machine) -> Any:
        if not all(type(a) in _PLAIN for a in args):
            raise Refused(f"NEWOBJ of {self.name} with other than plain values")
        return self.cls(*args) if self.cls is not None else args


class Function(Callee):
    """A function called by REDUCE, through ``call(args)`` which checks them and calls it."""

    def __init__(self, name: str, call: Any) -> None:
        self.name, self._call = name, call

    def reduce(self, args: tuple, machine: Machine) -> Any:
        return self._call(args, machine)


# -- the functions and their argument checks --------------------------------------------------------------------
def _encode(args: tuple, machine: Machine) -> bytes:
    """``_codecs.encode(text, 'latin1')``: how a protocol-2 pickle spells bytes."""
    if len(args) != 2 or type(args[0]) is not str or args[1] != "latin1":
        raise Refused("REDUCE calling _codecs.encode with other than (text, 'latin1')")
    try:
        return args[0].encode("latin1")
    except UnicodeEncodeError:
        raise Damaged("bytes spelled as text outside latin-1") from None


def _size(args: tuple, machine: Machine) -> Any:
    import torch

    if len(args) != 1 or not _ints(args[0]):
        raise Refused("REDUCE calling torch.Size with other than a tuple of sizes")
    return torch.Size(args[0])


def _ordered_dict(args: tuple, machine: Machine) -> Any:
    if args:
        raise Refused("REDUCE calling collections.OrderedDict with arguments")
    return OrderedDict()


def _path(args: tuple, machine: Machine) -> Any:
    from pathlib import PosixPath

    if not all(type(a) is str for a in args):
        raise Refused("REDUCE calling pathlib.PosixPath with other than strings")
    return PosixPath(*args)


@functools.cache
def _layouts() -> dict[str, Any]:
    import torch

    return {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}


def _get_layout(args: tuple, machine: Machine) -> Any:
    if len(args) != 1 or args[0] not in _layouts():
        raise Refused("REDUCE calling torch.serialization._get_layout with other than a layout's name")
    return _layouts()[args[0]]


# numpy: the RNG state's arrays. Only plain numeric dtypes in their canonical state; never an object dtype, never a
# dtype state the file writes (its flags decide whether numpy reads the bytes as PyObject pointers).
NUMPY_CODES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"})


class _Dtype(Callee):
    name = "numpy.dtype"

    def reduce(self, args: tuple, machine: Machine) -> Any:
        import numpy

        if len(args) != 3 or args[0] not in NUMPY_CODES or args[1:] != (False, True):
            raise Refused(f"numpy.dtype{args!r} (only a plain numeric dtype)" if len(repr(args)) < 60 else
                          "numpy.dtype of other than a plain numeric type")
        return machine.made(numpy.dtype(args[0]), self)

    def build(self, obj: Any, state: Any, machine: Machine) -> None:
        if state != obj.__reduce__()[2]:  # the state numpy itself saves for this dtype: nothing to change
            raise Refused(f"BUILD on numpy.dtype('{obj.str}') with a state numpy never saves for it (its flags "
                          "decide how numpy reads an array's bytes)")


class _Reconstruct(Callee):
    """``numpy._core.multiarray._reconstruct(ndarray, (0,), b'b')`` then BUILD with the array's state."""

    def __init__(self, name: str, ndarray: Token) -> None:
        self.name, self.ndarray = name, ndarray

    def reduce(self, args: tuple, machine: Machine) -> Any:
        import numpy

        if args != (self.ndarray, (0,), b"b"):
            raise Refused(f"REDUCE calling {self.name} with other than (numpy.ndarray, (0,), b'b')")
        return machine.made(numpy.ndarray((0,), dtype="b"), self)

    def build(self, obj: Any, state: Any, machine: Machine) -> None:
        import numpy

        ok = (type(state) is tuple and len(state) == 5 and state[0] == 1 and _ints(state[1])
              and isinstance(state[2], numpy.dtype) and not state[2].hasobject and state[2].kind in "biufc"
              and type(state[3]) is bool and type(state[4]) is bytes)
        if not ok:
            raise Refused("BUILD on a numpy.ndarray with a state other than a plain numeric array's bytes")
        if len(state[4]) != math.prod(state[1]) * state[2].itemsize:
            raise Damaged(f"a numpy array of shape {state[1]} holds {len(state[4])} bytes")
        obj.__setstate__(state)


# -- tensors ----------------------------------------------------------------------------------------------------
class Storage:
    """A storage a persistent id named, as the torch-file reader loaded it (``typed`` None in a scan)."""

    def __init__(self, dtype: Any, numel: int, typed: Any) -> None:
        self.dtype, self.numel, self.typed = dtype, numel, typed


class Hollow:
    """What a scan gives for a tensor: its storage is never read."""


class _RebuildTensor(Callee):
    """``torch._utils._rebuild_tensor_v2`` (and v3, which names the dtype: fp8 and the other dtypes without a
    storage class). The view must lie inside its storage (torch would grow the storage instead, reading memory the
    file never held); no backward hooks, no metadata."""

    def __init__(self, name: str, v3: bool) -> None:
        self.name, self.v3 = name, v3

    def reduce(self, args: tuple, machine: Machine) -> Any:
        import torch

        n = 7 if self.v3 else 6
        if len(args) not in (n, n + 1):
            raise Refused(f"REDUCE calling {self.name} with {len(args)} arguments")
        storage, offset, size, stride, requires_grad, hooks = args[:6]
        dtype: Any = args[6] if self.v3 else None
        extra = args[n] if len(args) > n else None
        ok = (isinstance(storage, Storage) and _is_int(offset) and offset >= 0 and _ints(tuple(size))
              and _ints(tuple(stride)) and len(size) == len(stride) and type(requires_grad) is bool
              and type(hooks) is OrderedDict and not hooks and (extra is None or extra == {})
              and (not self.v3 or isinstance(dtype, torch.dtype)))
        if not ok:
            raise Refused(f"REDUCE calling {self.name} with arguments a saved tensor never has")
        if self.v3:
            if storage.dtype != torch.uint8:
                raise Refused(f"{self.name} on a typed storage (it names the dtype of an untyped one)")
            elements = storage.numel // dtype.itemsize
        else:
            elements = storage.numel
        if math.prod(size) and offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) >= elements:
            raise Damaged(f"a tensor of size {tuple(size)} at offset {offset} lies outside its storage of "
                          f"{elements} elements")
        if storage.typed is None:
            return Hollow()
        if self.v3:
            return torch._utils._rebuild_tensor_v3(storage.typed, offset, tuple(size), tuple(stride),
                                                   requires_grad, OrderedDict(), dtype)
        return torch._utils._rebuild_tensor_v2(storage.typed, offset, tuple(size), tuple(stride), requires_grad,
                                               OrderedDict())


class _LoadFromBytes(Callee):
    """``torch.storage._load_from_bytes`` (or megatron-core's replacement): how a plain pickle of a tensor holds its
    storage (a nested torch file in the pre-zip format); read by mtk's reader, never ``torch.load``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def reduce(self, args: tuple, machine: Machine) -> Any:
        from .torch_file import read_legacy_storage

        if len(args) != 1 or type(args[0]) is not bytes:
            raise Refused(f"REDUCE calling {self.name} with other than bytes")
        return read_legacy_storage(args[0], hollow=machine.hollow)


# -- the tables -------------------------------------------------------------------------------------------------
DCP_META = "torch.distributed.checkpoint.metadata"
DCP_PLAN = "torch.distributed.checkpoint.planner"
DCP_FS = "torch.distributed.checkpoint.filesystem"

# the globals each kind of file may name (what the census finds, and the families noted above)
METADATA = frozenset({
    ("torch", "Size"), ("torch.serialization", "_get_layout"),
    (DCP_FS, "_StorageInfo"),
    # each rank's file prefix, in the local plans megatron-core keeps in .metadata once it reuses a save's plans
    # (train.checkpoint.assume_constant_structure / Megatron-LM's --ckpt-assume-constant-structure)
    (DCP_FS, "_StoragePrefix"),
    (DCP_META, "BytesStorageMetadata"), (DCP_META, "ChunkStorageMetadata"), (DCP_META, "Metadata"),
    (DCP_META, "MetadataIndex"), (DCP_META, "StorageMeta"), (DCP_META, "TensorProperties"),
    (DCP_META, "TensorStorageMetadata"), (DCP_META, "_MEM_FORMAT_ENCODING"),
    (DCP_PLAN, "SavePlan"), (DCP_PLAN, "TensorWriteData"), (DCP_PLAN, "WriteItem"), (DCP_PLAN, "WriteItemType"),
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id as torch's own FileSystemWriter records it
})

TENSORS = frozenset({("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
                     ("collections", "OrderedDict")})

NUMPY = frozenset({("numpy", "dtype"), ("numpy", "ndarray"), ("numpy._core.multiarray", "_reconstruct"),
                   ("numpy.core.multiarray", "_reconstruct")})  # numpy 1's spelling of the same

MEGATRON_ENUMS = frozenset({
    ("megatron.core.enums", "ModelType"),
    ("megatron.core.rerun_state_machine", "RerunDiagnostic"), ("megatron.core.rerun_state_machine", "RerunMode"),
    ("megatron.core.rerun_state_machine", "RerunState"),
    ("megatron.core.transformer.enums", "AttnBackend"), ("megatron.core.transformer.enums", "CudaGraphModule"),
    ("megatron.core.transformer.enums", "CudaGraphScope"),
    ("megatron.core.transformer.enums", "InferenceCudaGraphScope"),
})

# torch.save's objects: the common state (Megatron-LM's args, rerun state, mtk's extras), rng_state, the rerun
# state machine, the distributed optimizer's bookkeeping
OBJECTS = TENSORS | NUMPY | MEGATRON_ENUMS | frozenset({
    ("argparse", "Namespace"), ("_codecs", "encode"), ("signal", "Signals"), ("torch", "Size"),
    ("pathlib", "PosixPath"),  # a Path-valued argument in Megatron-LM's args (megatron-core admits it for that)
})

TE_RECIPE = "transformer_engine.common.recipe"
# a TransformerEngine module's _extra_state: a plain pickle of its FP8 recipe and scaling tensors
EXTRA_STATE = TENSORS | NUMPY | frozenset({
    ("torch", "Size"), ("torch.storage", "_load_from_bytes"), ("megatron.core.safe_globals", "safe_load_from_bytes"),
    (TE_RECIPE, "DelayedScaling"), (TE_RECIPE, "Float8CurrentScaling"), (TE_RECIPE, "Float8BlockScaling"),
    (TE_RECIPE, "MXFP8BlockScaling"), (TE_RECIPE, "NVFP4BlockScaling"), (TE_RECIPE, "MMParams"),
    (TE_RECIPE, "QParams"), (TE_RECIPE, "Format"), (TE_RECIPE, "_FormatHelper"),
    ("megatron.core.extensions.transformer_engine", "TEDelayedScaling"),
})

_ENUMS = MEGATRON_ENUMS | {("signal", "Signals"), (DCP_META, "_MEM_FORMAT_ENCODING"), (DCP_PLAN, "WriteItemType"),
                           (TE_RECIPE, "Format")}


@functools.cache
def dtypes() -> dict[str, Any]:
    """torch's dtypes by the name a pickle gives them (``torch.float32``): values, never called."""
    import torch

    return {name: v for name, v in vars(torch).items() if isinstance(v, torch.dtype)}


@functools.cache
def storage_kinds() -> dict[tuple[str, str], StorageKind]:
    """torch's storage types by the name a persistent id gives them, with their dtype."""
    import torch

    kinds = {("torch", "UntypedStorage"): StorageKind("torch.UntypedStorage", torch.uint8),
             ("torch.storage", "UntypedStorage"): StorageKind("torch.storage.UntypedStorage", torch.uint8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage's deprecation note, on reading each class's dtype
        for name in dir(torch):
            cls = getattr(torch, name)
            if (name.endswith("Storage") and isinstance(cls, type) and issubclass(cls, torch.storage.TypedStorage)
                    and cls is not torch.storage.TypedStorage and not name.startswith("Q")):
                kinds[("torch", name)] = StorageKind(f"torch.{name}", cls.dtype)
    return kinds


def admitted(module: str, name: str, table: frozenset[tuple[str, str]]) -> bool:
    """Whether a file of the kind ``table`` stands for may name ``module.name``."""
    if (module, name) in table:
        return True
    if table is not METADATA and (module, name) in storage_kinds():
        return True
    return module == "torch" and name in dtypes()


def _tensor_props_state(state: Any) -> bool:
    import torch
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

    return (type(state) is tuple and len(state) == 5 and isinstance(state[0], torch.dtype)
            and isinstance(state[1], torch.layout) and type(state[2]) is bool
            and isinstance(state[3], _MEM_FORMAT_ENCODING) and type(state[4]) is bool)


def _dcp_record(module: str, name: str) -> Record:
    cls = _import(module, name)
    if name == "TensorProperties":
        return Record(f"{module}.{name}", cls, setstate=cls.__setstate__, state_check=_tensor_props_state)
    return Record(f"{module}.{name}", cls)


def _make(module: str, name: str, real: bool) -> Any:
    """The rule (or value) for an admitted pair; ``real``: megatron's/TE's own classes (the ranks)."""
    dotted = f"{module}.{name}"
    if module == "torch" and name in dtypes():
        return dtypes()[name]
    if (module, name) in storage_kinds():
        return storage_kinds()[(module, name)]
    if (module, name) in _ENUMS:
        third_party = module.startswith(("megatron.", "transformer_engine."))
        return Enumerated(dotted, _real_or_none(module, name, real) if third_party else _import(module, name))
    if module in (DCP_META, DCP_PLAN, DCP_FS):
        return _dcp_record(module, name)
    if module.startswith(("megatron.", "transformer_engine.")) and name not in ("safe_load_from_bytes",):
        cls = _real_or_none(module, name, real)
        return NamedTuple(dotted, cls) if name == "_FormatHelper" else Record(dotted, cls)
    functions = {
        ("_codecs", "encode"): _encode, ("torch", "Size"): _size, ("collections", "OrderedDict"): _ordered_dict,
        ("pathlib", "PosixPath"): _path, ("torch.serialization", "_get_layout"): _get_layout,
    }
    if (module, name) in functions:
        return Function(dotted, functions[(module, name)])
    if (module, name) == ("argparse", "Namespace"):
        import argparse

        return Record(dotted, argparse.Namespace)
    if (module, name) == ("numpy", "dtype"):
        return _Dtype()
    if (module, name) == ("numpy", "ndarray"):
        return _NDARRAY
    if name == "_reconstruct":
        return _Reconstruct(dotted, _NDARRAY)
    if name.startswith("_rebuild_tensor_v"):
        return _RebuildTensor(dotted, v3=name.endswith("v3"))
    if name in ("_load_from_bytes", "safe_load_from_bytes"):
        return _LoadFromBytes(dotted)
    raise AssertionError(f"no rule for admitted {dotted}")  # a table without a rule: mtk's mistake


_NDARRAY = Token("numpy.ndarray")


class Rules:
    """One kind of file's rules: GLOBAL resolution for the machine (refusing any pair outside ``table``)."""

    def __init__(self, table: frozenset[tuple[str, str]], real: bool) -> None:
        self.table, self.real = table, real
        self._made: dict[tuple[str, str], Any] = {}

    def resolve(self, module: str, name: str) -> Any:
        key = (module, name)
        if key not in self._made:
            if not admitted(module, name, self.table):
                raise Refused(f"{module}.{name}")
            self._made[key] = _make(module, name, self.real)
        return self._made[key]
