"""The one reader of every pickle in a checkpoint: it polices the opcodes as well as the globals.

A checkpoint directory is data other people write (a shared filesystem, a download for ``train.init_from``). In a
pickle the opcodes are the attack surface, not only the globals: an admitted class called with keyword arguments
(NEWOBJ_EX: ``torch.UntypedStorage(n, allocator=<int>)`` calls a C++ method at an address the file chooses), an
admitted numpy dtype restored with its object flag cleared (numpy then reads the file's bytes as object pointers),
BUILD on an admitted class itself (``setattr`` on ``pathlib.PosixPath`` redirects every path in the process).

So mtk never hands a checkpoint's pickle to ``pickle``, ``torch.load`` or numpy's unpickling: :mod:`.machine` runs
its opcodes itself (only those real checkpoints use), bounding what it builds (nesting depth, dict keys, what
admitted callables copy: :mod:`.base`), :mod:`.rules` says what each kind of file may name and checks every
argument and state before anything is built (:mod:`.records`, :mod:`.dcp` field by field, :mod:`.tensor_rules`),
:mod:`.torch_file` reads torch.save's zip without ``torch.load``, and only its stored members. Why not torch's
own ``weights_only`` unpickler: it cannot read DCP's ``.metadata`` (protocol 4: FRAME, MEMOIZE, STACK_GLOBAL), its
allowlist is one per process (megatron-core's import adds numpy's dtype, ndarray, ``BytesIO``,
``torch._C.Generator`` to it for every load), it calls an admitted class with whatever positional arguments the
file gives, it lets a tensor view reach past its storage (torch then grows the storage, reading memory the file
never held), and its refusal is a paragraph, not a line naming the file.

A refusal is :class:`CheckpointRefused`: one line naming the file, what it is and the global or opcode, exit 2.
Nothing of the file ran; the process goes on. A damaged file is :class:`CheckpointDamagedPickle`, one line naming
it too. Readers: the resume precheck (``launcher/ckpt_precheck.py``), every rank (``training/checkpoint_guard.py``:
DCP's metadata, objects and tensors, megatron-core's ``common.pt`` and FP8 extra-state reads), and through them
``mtk convert``, ``train.init_from``, the reshard and interop paths.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO, Any

from mtk.exitcodes import BadInput

from . import records as _records
from . import rules as _rules
from . import torch_file
from .base import Damaged, Refused
from .machine import OPCODE_NAMES, Machine

# the globals each kind of file may name (the census tests keep every real checkpoint's inside them)
CHECKPOINT_GLOBALS = _rules.OBJECTS
METADATA_GLOBALS = _rules.METADATA
TENSOR_GLOBALS = _rules.TENSORS
EXTRA_STATE_GLOBALS = _rules.EXTRA_STATE
ADMITTED_OPCODES = OPCODE_NAMES
Inert = _records.Inert
InertEnum = _records.InertEnum

__all__ = ["ADMITTED_OPCODES", "CHECKPOINT_GLOBALS", "EXTRA_STATE_GLOBALS", "METADATA_GLOBALS", "TENSOR_GLOBALS",
           "CheckpointDamagedPickle", "CheckpointRefused", "admitted", "check_extra_state", "load_metadata",
           "load_tensor", "load_torch", "scan_torch"]


def admitted(module: str, name: str, allowed: frozenset[tuple[str, str]]) -> bool:
    """Whether a file of the kind ``allowed`` stands for (CHECKPOINT_GLOBALS, ...) may name ``module.name``."""
    return _rules.admitted(module, name, allowed)


class CheckpointRefused(BadInput, ValueError):
    """A checkpoint file holds a global or an opcode no checkpoint holds: nothing of it was run."""

    def __init__(self, where: str, what: str, thing: str) -> None:
        self.thing = thing
        super().__init__(f"{where}: the {what} holds {thing}, which a checkpoint never holds; refusing to load it "
                         "(restore the checkpoint from a copy you trust)")


class CheckpointDamagedPickle(BadInput, ValueError):
    """A checkpoint pickle is cut short or inconsistent (damaged, not hostile); the message names the file (exit 2)."""


def _run(where: str, what: str, read: Any) -> Any:
    try:
        return read()
    except Refused as exc:
        raise CheckpointRefused(where, what, exc.thing) from None
    except Damaged as exc:
        raise CheckpointDamagedPickle(f"{where}: the {what} cannot be read: {exc}") from None
    except BadInput:
        raise
    except (TypeError, ValueError, RuntimeError, IndexError, KeyError, AttributeError, OverflowError,
            MemoryError) as exc:  # a value that does not fit where the file puts it (a tensor as a dict key, ...)
        said = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise CheckpointDamagedPickle(f"{where}: the {what} cannot be read ({type(exc).__name__}: {said})") from None


def load_metadata(file: IO[bytes] | bytes, where: str) -> Any:
    """torch.distributed.checkpoint's ``.metadata`` (a plain pickle of its Metadata), each field of each record
    of the type torch writes there (:mod:`.dcp`)."""
    from torch.distributed.checkpoint.metadata import Metadata

    data = file if isinstance(file, bytes) else file.read()
    rules = _rules.Rules(METADATA_GLOBALS, real=True)
    meta = _run(where, "checkpoint metadata", lambda: Machine(data, rules.resolve).load())
    if type(meta) is not Metadata or not hasattr(meta, "storage_data") or not hasattr(meta, "state_dict_metadata"):
        raise CheckpointRefused(where, "checkpoint metadata", f"a {type(meta).__name__} where torch's Metadata is")
    return meta


def load_torch(data: bytes | IO[bytes], where: str, what: str, megatron_real: bool = False,
               hollow: bool = False) -> Any:
    """A torch.save'd checkpoint object (the common state, rng_state, ...), tensors on the CPU. ``megatron_real``:
    megatron's classes are the real ones (the ranks), inert stand-ins otherwise. ``hollow``: a scan, which checks
    every tensor but reads none."""
    file = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    rules = _rules.Rules(CHECKPOINT_GLOBALS, real=megatron_real)
    return _run(where, what, lambda: torch_file.load(file, rules.resolve, hollow=hollow))


def scan_torch(file: IO[bytes], where: str, what: str) -> None:
    """Refuse a torch.save'd object holding anything a checkpoint object never holds; reads its pickle, never its
    tensors."""
    load_torch(file, where, what, hollow=True)


def load_tensor(data: bytes | IO[bytes], where: str) -> Any:
    """One tensor item of a DCP shard (a torch.save of one tensor): only the tensor rebuild is admitted."""
    file = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    rules = _rules.Rules(TENSOR_GLOBALS, real=False)
    tensor = _run(where, "tensor data", lambda: torch_file.load(file, rules.resolve))
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise CheckpointRefused(where, "tensor data", f"a {type(tensor).__name__} where a tensor is stored")
    return tensor


def check_extra_state(state: Any, where: str, real: bool = False) -> None:
    """A module's ``_extra_state`` as loaded from a checkpoint: TransformerEngine unpickles its bytes itself (plain
    ``pickle.loads`` of a uint8 tensor, or ``torch.load`` of a BytesIO in the old format), so they are run here
    first, through the machine, and refused unless they hold only an FP8 recipe and its tensors."""
    import torch

    rules = _rules.Rules(EXTRA_STATE_GLOBALS, real=real)
    if isinstance(state, torch.Tensor):
        if state.numel() == 0:
            return  # no FP8 state
        held = state.untyped_storage().nbytes() - state.storage_offset() * state.element_size()
        if state.numel() * state.element_size() > held:  # a view repeating its storage's bytes: never copied
            raise CheckpointRefused(where, "FP8 extra state", f"a tensor view of {state.numel()} elements over "
                                    f"{held} bytes of storage")
        data = state.detach().cpu().contiguous().numpy().tobytes()
        _run(where, "FP8 extra state", lambda: Machine(data, rules.resolve).load())
    elif isinstance(state, io.BytesIO):
        _run(where, "FP8 extra state", lambda: torch_file.load(io.BytesIO(state.getvalue()), rules.resolve))


def unpickler_class(where: str, what: str, table: frozenset[tuple[str, str]] = EXTRA_STATE_GLOBALS,
                    real: bool = True, wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> type:
    """A ``pickle.Unpickler``-shaped class (``Cls(file).load()``) running the machine: what replaces
    megatron-core's own ``SafeUnpickler`` for FP8 extra state on the ranks. ``wrap``: around its ``load``."""

    class PolicedUnpickler:
        def __init__(self, file: IO[bytes], **_: Any) -> None:
            self.file = file

        def _load(self) -> Any:
            rules = _rules.Rules(table, real=real)
            data = self.file.read()
            return _run(where, what, lambda: Machine(data, rules.resolve).load())

        load = wrap(_load) if wrap is not None else _load

    return PolicedUnpickler
