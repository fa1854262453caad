"""Unpickle a checkpoint's pickles admitting only the globals real checkpoints hold; refuse any other by name.

A checkpoint directory is data other people write (a shared filesystem, a download for ``train.init_from``),
and a pickle may name any importable callable for the unpickler to call (``os.system``). ``find_class`` is the
one door through which a pickle reaches a global, so each unpickler here admits only the pairs below and refuses
any other with one line naming the file and the global, before anything is called.

The pairs are the ones real checkpoints hold (recorded with ``pickletools`` from mtk's own checkpoints of every
layout the tests write and from Megatron-LM's; ``tests/unit/launcher/test_ckpt_refuses_code.py`` and
``tests/integration/launcher/test_checkpoint_refuses_code.py`` keep each census inside them), plus the classes
megatron-core registers as safe for its own ``weights_only`` loads (``megatron/core/safe_globals.py``). Families
that vary with the run (a dtype, a storage type) are admitted by name pattern. Not admitted although
megatron-core's FP8 extra-state unpickler is: ``torch.storage._load_from_bytes``, a nested ``torch.load`` without
``weights_only`` until megatron's import replaces it (the launch side never imports megatron). Megatron's
classes are never imported here: the launch-side readers give inert stand-ins; the ranks, which have imported
megatron, get the real class (an enum or a config dataclass).
"""

from __future__ import annotations

import importlib
import io
import pickle
import zipfile
from typing import IO, Any

from mtk.exitcodes import BadInput

# torch.save's objects: the common state (Megatron-LM's args, rerun state, mtk's extras), rng_state, the
# rerun state machine, the distributed optimizer's bookkeeping, TransformerEngine's extra state.
CHECKPOINT_GLOBALS = frozenset({
    ("argparse", "Namespace"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),  # bytes in a protocol-2 pickle (numpy's RNG state)
    ("signal", "Signals"),  # Megatron-LM's args.exit_signal
    ("torch", "Size"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),  # numpy 1's spelling of the same
    ("numpy.dtypes", "UInt32DType"),
    # megatron-core's own SAFE_GLOBALS (megatron/core/safe_globals.py), beyond the above
    ("types", "SimpleNamespace"),
    ("pathlib", "PosixPath"),
    ("_io", "BytesIO"),
    ("torch._C", "Generator"),
    ("megatron.core.enums", "ModelType"),
    ("megatron.core.optimizer.optimizer_config", "OptimizerConfig"),
    ("megatron.core.rerun_state_machine", "RerunDiagnostic"),
    ("megatron.core.rerun_state_machine", "RerunMode"),
    ("megatron.core.rerun_state_machine", "RerunState"),
    ("megatron.core.transformer.enums", "AttnBackend"),
    ("megatron.core.transformer.enums", "CudaGraphModule"),
    ("megatron.core.transformer.enums", "CudaGraphScope"),
    ("megatron.core.transformer.enums", "InferenceCudaGraphScope"),
})

# torch.distributed.checkpoint's ``.metadata`` (a plain pickle of its Metadata).
METADATA_GLOBALS = frozenset({
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id as torch's own FileSystemWriter records it
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    # each rank's file prefix, in the local plans megatron-core keeps in .metadata once it reuses a save's plans
    # (train.checkpoint.assume_constant_structure / Megatron-LM's --ckpt-assume-constant-structure), from the
    # second save on
    ("torch.distributed.checkpoint.filesystem", "_StoragePrefix"),
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.planner", "SavePlan"),
    ("torch.distributed.checkpoint.planner", "TensorWriteData"),
    ("torch.distributed.checkpoint.planner", "WriteItem"),
    ("torch.distributed.checkpoint.planner", "WriteItemType"),
})

# A tensor's dtype and storage type vary with the run's precision (fp32, bf16, fp16, fp8, int): the whole family.
DTYPES = frozenset({"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
                    "int16", "int8", "uint8", "bool", "complex64", "complex128"})


def admitted(module: str, name: str, allowed: frozenset[tuple[str, str]]) -> bool:
    if (module, name) in allowed:
        return True
    return module == "torch" and (name in DTYPES or (name.endswith("Storage") and name.isidentifier()))


class CheckpointRefused(BadInput, ValueError):
    """A checkpoint file names a global no checkpoint holds: nothing of it was run."""

    def __init__(self, where: str, what: str, module: str, name: str) -> None:
        self.glob = f"{module}.{name}"
        super().__init__(f"{where}: the {what} holds {self.glob}, which a checkpoint never holds; refusing to load "
                         "it (restore the checkpoint from a copy you trust)")


class Inert:
    """Stands in for a class of megatron's: takes any constructor arguments and state, runs nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _Hollow(Inert):
    """Stands in for every admitted global in a scan: the pickle is walked, nothing real is built."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Hollow:
        return _Hollow()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


def _resolve(module: str, name: str, megatron_real: bool) -> Any:
    if module.split(".")[0] == "megatron" and not megatron_real:
        return type(name, (Inert,), {"__module__": module})
    return getattr(importlib.import_module(module), name)


def _unpickler(allowed: frozenset[tuple[str, str]], where: str, what: str, megatron_real: bool,
               hollow: bool = False) -> type[pickle.Unpickler]:
    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if not admitted(module, name, allowed):
                raise CheckpointRefused(where, what, module, name)
            return _Hollow if hollow else _resolve(module, name, megatron_real)

        if hollow:
            def persistent_load(self, pid: Any) -> Any:  # a tensor's storage: not read in a scan
                return _Hollow()

    return Restricted


class _PickleModule:
    """A ``pickle_module`` for ``torch.load`` whose Unpickler admits only ``allowed``."""

    def __init__(self, unpickler: type[pickle.Unpickler]) -> None:
        self.Unpickler = unpickler
        self.__name__ = "mtk_checkpoint_unpickle"

    def load(self, file: IO[bytes], **kwargs: Any) -> Any:
        return self.Unpickler(file, **kwargs).load()


def load_torch(data: bytes | IO[bytes], where: str, what: str, megatron_real: bool = False) -> Any:
    """``torch.load`` of a checkpoint object (tensors to CPU), refusing any global outside CHECKPOINT_GLOBALS."""
    import torch

    file = io.BytesIO(data) if isinstance(data, bytes) else data
    module = _PickleModule(_unpickler(CHECKPOINT_GLOBALS, where, what, megatron_real))
    # weights_only=False only hands the unpickling to ``module``, whose find_class admits the list above
    return torch.load(file, map_location="cpu", weights_only=False, pickle_module=module)


def load_metadata(file: IO[bytes], where: str) -> Any:
    """torch.distributed.checkpoint's ``.metadata``, refusing any global outside METADATA_GLOBALS."""
    return _unpickler(METADATA_GLOBALS, where, "checkpoint metadata", megatron_real=False)(file).load()


def scan_torch(file: IO[bytes], where: str, what: str) -> None:
    """Refuse a torch.save'd object (zip format) naming a global outside CHECKPOINT_GLOBALS; reads only its
    pickle, never its tensors, and builds nothing. A file in torch's pre-zip format is loaded instead."""
    try:
        archive = zipfile.ZipFile(file)
    except zipfile.BadZipFile:
        file.seek(0)
        load_torch(file, where, what)
        return
    with archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        for name in names:
            _unpickler(CHECKPOINT_GLOBALS, where, what, megatron_real=False, hollow=True)(
                io.BytesIO(archive.read(name))).load()
