"""Make every checkpoint read on a rank go through mtk's reader (:mod:`mtk.checkpoint_unpickle`) and stay inside the
checkpoint dir (:mod:`mtk.checkpoint_files`).

megatron-core 0.19.2 reads a checkpoint through torch DCP and a few reads of its own; each unpickles a file whoever
can write the checkpoint dir wrote:

- DCP's ``FileSystemReader.read_metadata``: ``.metadata`` with plain ``pickle.load``;
- DCP's ``DefaultLoadPlanner.load_bytes``: the common state and every ShardedObject (rng_state, the rerun state,
  optimizer bookkeeping, a TE module's ``_extra_state``) with ``torch.load(weights_only=False)`` — megatron-core's
  own ``weights_only=True`` applies only to what that first load returns;
- DCP's ``FileSystemReader.read_data``: each tensor with ``torch.load(weights_only=True)``, whose allowlist
  megatron-core's import widens for the whole process, and each shard file at ``<dir>/<relative_path>`` as
  ``.metadata`` spells it (``../../x`` included);
- megatron-core's ``load_common``: a legacy ``common.pt`` with ``torch.load`` (weights_only by torch's default);
- megatron-core's ``SafeUnpickler`` (FP8 extra state): ``pickle.Unpickler`` with an allowlist of globals only, and
  TransformerEngine's ``set_extra_state``, which unpickles the same bytes with plain ``pickle.loads``.

:func:`install` replaces the three DCP methods for the whole process; megatron-core's two are replaced as soon as
their modules are imported (now, or through an import hook), so every path — a resume, ``train.init_from``,
``mtk convert``, the reshard and interop readers — reads through the one reader. A module's extra state is run
through the reader when its object is loaded, before TransformerEngine sees it. A refusal is the engine's
(:class:`CheckpointUntrusted`, a :class:`~.refusal.Refused`): DCP gathers it from every rank that read the file,
and it comes out of ``torch.distributed.checkpoint.load`` as that one line, not as DCP's per-rank traceback.
"""

from __future__ import annotations

import functools
import importlib.abc
import io
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtk import checkpoint_unpickle
from mtk.checkpoint_files import ShardPathRefused, open_inside, path_inside

from .refusal import Refused

# a damaged pickle too: each rank would otherwise die of it in DCP's traceback, exit 1
_UNTRUSTED = (checkpoint_unpickle.CheckpointRefused, checkpoint_unpickle.CheckpointDamagedPickle, ShardPathRefused)


class CheckpointUntrusted(Refused):
    """A checkpoint file holds what no checkpoint holds, is damaged, or names a file outside its dir: every rank
    reading it refuses in the same line (exit 2); nothing of it ran."""


_seen = threading.local()  # the refusal raised during the current DCP load on this thread (see _unwrapping)


def _policed(read: Callable[..., Any]) -> Callable[..., Any]:
    """A reader whose refusals are the engine's (one line from rank 0, exit 2), not a traceback per rank."""

    @functools.wraps(read)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return read(*args, **kwargs)
        except _UNTRUSTED as exc:
            _seen.refusal = CheckpointUntrusted(str(exc))
            raise _seen.refusal from None
        except CheckpointUntrusted as exc:
            _seen.refusal = exc
            raise

    return run


def _refusal_in(exc: BaseException | None, depth: int = 0) -> CheckpointUntrusted | None:
    """The refusal inside what DCP raised: it gathers each rank's exception into a CheckpointException (a
    BaseException holding (exception, traceback) per rank)."""
    if exc is None or depth > 8:
        return None
    if isinstance(exc, CheckpointUntrusted):
        return exc
    for failure in (getattr(exc, "failures", None) or {}).values():
        found = _refusal_in(failure[0] if isinstance(failure, tuple) else failure, depth + 1)
        if found is not None:
            return found
    return _refusal_in(exc.__cause__ or exc.__context__, depth + 1)


def _unwrapping(load: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.distributed.checkpoint.load``, raising a refusal as itself: DCP gathers it into a
    CheckpointException, or (a refused ``.metadata``) catches it, tries ``__<rank>.metadata`` and raises an
    AssertionError quoting both."""
    if getattr(load, "_mtk_unwrapping", False):
        return load

    @functools.wraps(load)
    def run(*args: Any, **kwargs: Any) -> Any:
        _seen.refusal = None
        try:
            return load(*args, **kwargs)
        except BaseException as exc:
            found = _refusal_in(exc) or getattr(_seen, "refusal", None)
            if found is None or found is exc:
                raise
            raise CheckpointUntrusted(str(found)) from None

    run._mtk_unwrapping = True  # type: ignore[attr-defined]
    return run

_SOURCE = "_mtk_source"  # the checkpoint dir, kept on the Metadata a reader returns, for the refusal's message
COMMON_PREFIX = "common_state"
EXTRA_STATE = "_extra_state"


@_policed
def _read_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
    """FileSystemReader.read_metadata (torch 2.13): ``.metadata`` through mtk's reader, opened without following a
    link, every shard path in it checked to stay inside the dir."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    rank = kwargs.get("rank")
    name = ".metadata" if rank is None else f"__{rank}.metadata"
    root = str(self.path)
    with open_inside(root, name, root) as fh:
        metadata = checkpoint_unpickle.load_metadata(fh, str(Path(root) / name))
    for info in (metadata.storage_data or {}).values():
        path_inside(root, info.relative_path, str(Path(root) / name))
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = self.load_id
    setattr(metadata, _SOURCE, root)
    return metadata


def _where(planner: Any, read_item: Any) -> str:
    """The file a refusal names: the checkpoint dir for the common state, else the object's shard."""
    metadata = getattr(planner, "metadata", None)
    root = getattr(metadata, _SOURCE, None)
    if metadata is None or root is None:
        return "the checkpoint"
    fqn = read_item.dest_index.fqn
    info = (metadata.storage_data or {}).get(read_item.storage_index)
    if fqn.startswith(COMMON_PREFIX) or info is None:
        return root
    return str(Path(root) / info.relative_path)


@_policed
def _load_bytes(self: Any, read_item: Any, value: Any) -> None:
    """DefaultLoadPlanner.load_bytes (torch 2.13) through mtk's reader; megatron's classes are the real ones (the
    ranks have imported megatron). A module's FP8 extra state is run through the reader too."""
    from torch.distributed.checkpoint._traverse import set_element

    fqn = read_item.dest_index.fqn
    where = _where(self, read_item)
    what = "common state" if fqn.startswith(COMMON_PREFIX) else fqn.split("/")[0]
    obj = checkpoint_unpickle.load_torch(value.getvalue() if isinstance(value, io.BytesIO) else value.read(),
                                         where, what, megatron_real=True)
    if EXTRA_STATE in fqn:
        checkpoint_unpickle.check_extra_state(obj, where)
    if self.flatten_state_dict:
        set_element(self.original_state_dict, self.mappings[fqn], obj)
    else:
        self.state_dict[fqn] = obj


@_policed
def _read_data(self: Any, plan: Any, planner: Any) -> Any:
    """FileSystemReader.read_data (torch 2.13): each shard opened inside the dir without following a link, each
    object through the planner's ``load_bytes`` (above), each tensor through mtk's reader."""
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint.planner import LoadItemType
    from torch.futures import Future

    root = str(self.path)
    named_in = str(Path(root) / ".metadata")
    per_file: dict[str, list[Any]] = {}
    for read_item in plan.items:
        per_file.setdefault(self.storage_data[read_item.storage_index].relative_path, []).append(read_item)
    for relative_path, reqs in per_file.items():
        with open_inside(root, relative_path, named_in) as stream:
            for req in reqs:
                info = self.storage_data[req.storage_index]
                if info.transform_descriptors:
                    raise checkpoint_unpickle.CheckpointRefused(
                        str(Path(root) / relative_path), req.storage_index.fqn,
                        f"transforms ({', '.join(info.transform_descriptors)}) megatron-core never writes")
                stream.seek(info.offset)
                data = stream.read(info.length)
                if len(data) != info.length:
                    raise checkpoint_unpickle.CheckpointDamagedPickle(
                        f"{Path(root) / relative_path}: {req.storage_index.fqn} is cut short (the shard is "
                        "truncated)")
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(data))
                    continue
                tensor = checkpoint_unpickle.load_tensor(data, str(Path(root) / relative_path))
                tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != tensor.size():
                    raise checkpoint_unpickle.CheckpointDamagedPickle(
                        f"{Path(root) / relative_path}: {req.storage_index.fqn} has size {tuple(tensor.size())}, "
                        f"the plan reads {tuple(target.size())}")
                target.copy_(tensor)
                planner.commit_tensor(req, target)
    future: Future = Future()
    future.set_result(None)
    return future


@_policed
def _load_common(checkpoint_dir: Any) -> Any:
    """megatron-core's ``load_common`` (a legacy ``common.pt``) through mtk's reader."""
    from megatron.core.dist_checkpointing.mapping import CheckpointingException

    root = str(checkpoint_dir)
    try:
        fh = open_inside(root, "common.pt", root)
    except FileNotFoundError as exc:
        raise CheckpointingException(f"Common file {Path(root) / 'common.pt'} does not exist") from exc
    with fh:
        return checkpoint_unpickle.load_torch(fh.read(), str(Path(root) / "common.pt"), "common state",
                                              megatron_real=True)


def _patch_megatron_common(module: Any) -> None:
    module.load_common = _load_common


def _patch_megatron_safe_globals(module: Any) -> None:
    module.SafeUnpickler = checkpoint_unpickle.unpickler_class("a TransformerEngine module", "FP8 extra state",
                                                               wrap=_policed)


# megatron-core's modules whose reads are replaced, and how; patched on import (see _AfterImport)
MEGATRON_PATCHES: dict[str, Callable[[Any], None]] = {
    "megatron.core.dist_checkpointing.strategies.common": _patch_megatron_common,
    "megatron.core.dist_checkpointing.serialization": _patch_megatron_common,  # imports load_common by name
    "megatron.core.safe_globals": _patch_megatron_safe_globals,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch right after one of MEGATRON_PATCHES' modules is imported (installing the guard must not import
    megatron: the CPU layer has to act before megatron.core's import)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in MEGATRON_PATCHES:
            return None
        spec = None
        for finder in sys.meta_path:  # the finder that would have found it (the path finder, an editable install's)
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            MEGATRON_PATCHES[name](module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Route every checkpoint read in this process through mtk's reader (idempotent)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import default_planner, filesystem, state_dict_loader

    dcp.load = _unwrapping(dcp.load)
    state_dict_loader.load = _unwrapping(state_dict_loader.load)
    filesystem.FileSystemReader.read_metadata = _read_metadata  # type: ignore[method-assign]
    filesystem.FileSystemReader.read_data = _read_data  # type: ignore[method-assign]
    default_planner.DefaultLoadPlanner.load_bytes = _load_bytes  # type: ignore[method-assign]
    for name, patch in MEGATRON_PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
