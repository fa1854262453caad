"""What each kind of checkpoint pickle may name, and which rule builds each thing it names.

A rule is a :class:`~.base.Callee` (or a plain value such as a dtype): it accepts only the arguments and states
real checkpoints give it, checked before any of them reaches a constructor, and builds the object itself. The rule
kinds are in :mod:`.records` (classes, enums, functions), :mod:`.dcp` (DCP's dataclasses, field by field) and
:mod:`.tensor_rules` (tensors, shapes, numpy arrays). Nothing here imports a module by a name the file gives;
megatron's and TransformerEngine's classes are the real ones only where the caller asks for them (the ranks) and
can import them, inert stand-ins otherwise (the launch side).

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
from collections import OrderedDict
from typing import Any

from . import dcp
from .base import Builder, Damaged, Refused, Token
from .records import Enumerated, Function, NamedTuple, Record
from .tensor_rules import Dtype, LoadFromBytes, RebuildTensor, Reconstruct, size
from .values import dtypes, storage_kinds


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


# -- the functions and their argument checks --------------------------------------------------------------------
def _encode(args: tuple, machine: Builder) -> bytes:
    """``_codecs.encode(text, 'latin1')``: how a protocol-2 pickle spells bytes."""
    if len(args) != 2 or type(args[0]) is not str or type(args[1]) is not str or args[1] != "latin1":
        raise Refused("REDUCE calling _codecs.encode with other than (text, 'latin1')")
    machine.charge(len(args[0]), "bytes")
    try:
        return args[0].encode("latin1")
    except UnicodeEncodeError:
        raise Damaged("bytes spelled as text outside latin-1") from None


def _ordered_dict(args: tuple, machine: Builder) -> Any:
    if args:
        raise Refused("REDUCE calling collections.OrderedDict with arguments")
    return machine.opened(OrderedDict())


PATH_MAX = 4096  # the longest path Linux opens


def _path(args: tuple, machine: Builder) -> Any:
    from pathlib import PosixPath

    if not all(type(a) is str for a in args) or sum(len(a) for a in args) > PATH_MAX:
        raise Refused(f"REDUCE calling pathlib.PosixPath with other than strings of at most {PATH_MAX} characters")
    machine.charge(sum(len(a) for a in args), "paths")
    return PosixPath(*args)


@functools.cache
def _layouts() -> dict[str, Any]:
    import torch

    return {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}


def _get_layout(args: tuple, machine: Builder) -> Any:
    if len(args) != 1 or type(args[0]) is not str or args[0] not in _layouts():
        raise Refused("REDUCE calling torch.serialization._get_layout with other than a layout's name")
    return _layouts()[args[0]]


# -- the tables -------------------------------------------------------------------------------------------------
META, PLAN, FS = dcp.META, dcp.PLAN, dcp.FS

# the globals each kind of file may name (what the census finds, and the families noted above)
METADATA = frozenset({
    ("torch", "Size"), ("torch.serialization", "_get_layout"),
    (FS, "_StorageInfo"),
    # each rank's file prefix, in the local plans megatron-core keeps in .metadata once it reuses a save's plans
    # (train.checkpoint.assume_constant_structure / Megatron-LM's --ckpt-assume-constant-structure)
    (FS, "_StoragePrefix"),
    (META, "BytesStorageMetadata"), (META, "ChunkStorageMetadata"), (META, "Metadata"),
    (META, "MetadataIndex"), (META, "StorageMeta"), (META, "TensorProperties"),
    (META, "TensorStorageMetadata"), (META, "_MEM_FORMAT_ENCODING"),
    (PLAN, "SavePlan"), (PLAN, "TensorWriteData"), (PLAN, "WriteItem"), (PLAN, "WriteItemType"),
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

_ENUMS = MEGATRON_ENUMS | {("signal", "Signals"), (META, "_MEM_FORMAT_ENCODING"), (PLAN, "WriteItemType"),
                           (TE_RECIPE, "Format")}


def admitted(module: str, name: str, table: frozenset[tuple[str, str]]) -> bool:
    """Whether a file of the kind ``table`` stands for may name ``module.name``."""
    if (module, name) in table:
        return True
    if table is not METADATA and (module, name) in storage_kinds():
        return True
    return module == "torch" and name in dtypes()


_FUNCTIONS = {
    ("_codecs", "encode"): _encode, ("torch", "Size"): size, ("collections", "OrderedDict"): _ordered_dict,
    ("pathlib", "PosixPath"): _path, ("torch.serialization", "_get_layout"): _get_layout,
}


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
    if module in dcp.MODULES:
        return dcp.record(module, name)
    if module.startswith(("megatron.", "transformer_engine.")) and name not in ("safe_load_from_bytes",):
        cls = _real_or_none(module, name, real)
        return NamedTuple(dotted, cls) if name == "_FormatHelper" else Record(dotted, cls)
    if (module, name) in _FUNCTIONS:
        return Function(dotted, _FUNCTIONS[(module, name)])
    if (module, name) == ("argparse", "Namespace"):
        import argparse

        return Record(dotted, argparse.Namespace)
    if (module, name) == ("numpy", "dtype"):
        return Dtype()
    if (module, name) == ("numpy", "ndarray"):
        return _NDARRAY
    if name == "_reconstruct":
        return Reconstruct(dotted, _NDARRAY)
    if name.startswith("_rebuild_tensor_v"):
        return RebuildTensor(dotted, v3=name.endswith("v3"))
    if name in ("_load_from_bytes", "safe_load_from_bytes"):
        return LoadFromBytes(dotted)
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
