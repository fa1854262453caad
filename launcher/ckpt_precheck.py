"""Check the checkpoint a run will resume from, once, before torchrun starts any rank.

A garbage tracker, a missing ``iter_N`` or a truncated shard otherwise surfaces as one traceback per rank,
deep inside the load, with the file name buried or absent. Here each is one message naming the file and the
fix, and the step exits with the bad-input code. Reads only the tracker, the directory listing, the torch
distributed-checkpoint ``.metadata``, file sizes and the small common state (never the tensors).

A resume at a layout the checkpoint cannot be loaded at (``mtk.training.reshard``: a changed model shape, a
``dp_reshardable`` distributed optimizer at another tp/pp, ...) is refused here too, naming the spec field,
before torchrun spends minutes starting ranks. The common state is unpickled without importing megatron
(seconds per node otherwise): megatron's own classes in it (rerun-state enums) become inert stand-ins.

A checkpoint dir is data other people write. Every pickle in it (``.metadata``, the common state, each pickled
object the ranks will load, a TransformerEngine module's FP8 extra state) is read through
:mod:`mtk.checkpoint_unpickle`, which runs only the opcodes and globals real checkpoints hold: anything else
(``os.system``, NEWOBJ_EX, BUILD on a class) is refused by name, exit 2, before anything of it runs. Every file is
opened through :mod:`mtk.checkpoint_files`: a shard path that leaves the iteration dir (``../``, absolute, a
symbolic link) is refused by name, and nothing outside the dir is opened or stat'ed; the iteration dir the tracker
names must not be a link either, and the tracker is read through :func:`mtk.checkpoint_files.read_tracker` (never a
link, never more than a few bytes). A pickle that is damaged rather than hostile is named here too, in one line:
the ranks would each die of it in a traceback.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO, Any

from mtk import checkpoint_unpickle
from mtk.checkpoint_files import (
    RELEASE,
    ShardPathRefused,
    TrackerUnreadable,
    open_inside,
    path_inside,
    read_tracker,
    sizes_inside,
)
from mtk.checkpoint_paths import TRACKER, checkpoint_dir
from mtk.checkpoint_unpickle import CheckpointDamagedPickle, CheckpointRefused
from mtk.exitcodes import BadInput
from mtk.files import ByteWindow


class CheckpointDamaged(BadInput, ValueError):
    """The checkpoint to resume from cannot be loaded; the message names the file."""


class CheckpointUnsafe(CheckpointDamaged):
    """A pickle in the checkpoint holds a global or opcode no checkpoint holds (mtk.checkpoint_unpickle), or a file
    it names lies outside its dir (mtk.checkpoint_files); nothing ran, nothing outside was opened."""


_UNSAFE = (CheckpointRefused, ShardPathRefused)


def _not_a_link(path: Path) -> None:
    """The iteration dir the tracker names is read below it only if it is a real dir (lstat of the name alone)."""
    if path.is_symlink():
        raise CheckpointUnsafe(f"{path} is a symbolic link; a checkpoint's iteration dir is a plain dir — refusing "
                               "to follow it (replace it with the checkpoint itself, or delete the tracker)")


def reporting_node(env) -> bool:
    """Whether this node names an input error: node 0 of a multi-node job, or any node whose rank is unknown
    before the rendezvous (local; elastic Kubeflow, where each pod has its own log anyway)."""
    from mtk.rendezvous import node_place

    return node_place(env).node_rank in (None, 0)


def check_resume_checkpoint_once(job, run_dir: str, env=os.environ) -> None:
    """check_resume_checkpoint on every node; on all but the reporting one, a one-line pointer instead."""
    try:
        check_resume_checkpoint(job, run_dir)
    except CheckpointDamaged:
        if reporting_node(env):
            raise
        raise CheckpointDamaged("the checkpoint to resume from cannot be loaded: node 0 reports which file "
                                "and the fix; no node starts training") from None


def checkpoint_root(job, run_dir: str) -> Path:
    return Path(checkpoint_dir(job.train.checkpoint.dir, run_dir))


def check_resume_checkpoint(job, run_dir: str) -> None:
    """Raise CheckpointDamaged if the tracked checkpoint is unusable; silent when there is none to load."""
    if not job.train.checkpoint.load:
        return
    root = checkpoint_root(job, run_dir)
    tracker = root / TRACKER
    text = read_tracker_entry(root)
    if text is None:
        return
    if text == RELEASE:  # Megatron-LM's weights-only checkpoint in <root>/release
        path = root / RELEASE
        _not_a_link(path)
        if not path.is_dir():
            raise CheckpointDamaged(f"{tracker} names {RELEASE} but {path} is missing: restore it, or point the "
                                    "tracker at a complete iter_* dir, or delete the tracker")
        _check_shards(path)
        _check_layout(job, path, release=True)
        return
    path = root / f"iter_{int(text):07d}"
    _not_a_link(path)
    if not path.is_dir():
        raise CheckpointDamaged(f"{tracker} names iteration {int(text)} but {path} is missing: restore it, or point "
                                "the tracker at another complete iter_* dir, or delete the tracker")
    _check_shards(path)
    _check_layout(job, path, release=False)


def read_tracker_entry(root: Path) -> str | None:
    """The tracker's entry (an iteration number or ``release``), None without one; CheckpointUnsafe for a link or a
    special file (never followed), CheckpointDamaged for anything else it holds (mtk.checkpoint_files.read_tracker:
    never more than a few bytes read)."""
    try:
        return read_tracker(root)
    except TrackerUnreadable as exc:
        raise (CheckpointUnsafe if exc.unsafe else CheckpointDamaged)(str(exc)) from None


def _check_layout(job, path: Path, release: bool) -> None:
    """Refuse (ReshardRefused, exit 2) a resume this job's layout cannot load; silent if unreadable here
    (every rank checks again before it loads)."""
    from mtk.training import checkpoint, reshard

    common = read_common_state(path)
    if common is None:
        return
    reshard.plan(common, job, f"checkpoint {path}", optimizer_state=checkpoint.has_optimizer_state(common, release),
                 vocab_size=_built_vocab_size(job))


def _built_vocab_size(job) -> int | None:
    """The vocabulary the ranks will build the model with (the tokenizer's); None when the tokenizer cannot
    be read here — the ranks build it and check again before they load."""
    from mtk.training.data import tokenizer_info

    try:
        return tokenizer_info(job).vocab_size
    except Exception:
        return None


COMMON_KEY = "common_state/shard_0_1"  # megatron-core's ShardedObject("common_state", ..., (1,), (0,))


def read_metadata(path: Path) -> Any:
    """torch.distributed.checkpoint's ``.metadata`` of ``path``, through mtk's reader (torch reads it with plain
    ``pickle.load``), every shard path in it checked to stay inside ``path``; CheckpointUnsafe naming the file when
    it holds anything else, CheckpointDamaged when it is damaged."""
    metadata = path / ".metadata"
    try:
        with open_inside(path, ".metadata", str(path)) as fh:
            meta = checkpoint_unpickle.load_metadata(fh, str(metadata))
        for info in (meta.storage_data or {}).values():
            path_inside(path, info.relative_path, str(metadata))
        return meta
    except _UNSAFE as exc:
        raise CheckpointUnsafe(str(exc)) from None
    except Exception as exc:  # a damaged file: name the file, not the internals
        raise CheckpointDamaged(f"{metadata} cannot be read ({type(exc).__name__}: {exc}); the checkpoint is "
                                "damaged — point the tracker at another iter_* dir or delete it") from None


def _objects(path: Path, meta: Any) -> list[tuple[str, str, int, int]]:
    """Every pickled object megatron-core will unpickle on the ranks (the common state, rng_state, the rerun
    state, optimizer bookkeeping, FP8 extra state): (key, shard path relative to ``path``, offset, length)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    found = []
    for index, info in (meta.storage_data or {}).items():
        if not isinstance(meta.state_dict_metadata.get(index.fqn), BytesStorageMetadata):
            continue
        if getattr(info, "transform_descriptors", None):
            raise CheckpointDamaged(f"{path / info.relative_path}: {index.fqn} is stored through transforms "
                                    f"({', '.join(info.transform_descriptors)}) megatron-core never writes; "
                                    "refusing to load it")
        found.append((index.fqn, info.relative_path, int(info.offset), int(info.length)))
    return found


def _what(key: str) -> str:
    return "common state" if key == COMMON_KEY else key.split("/")[0]


EXTRA_STATE = "_extra_state"  # a TransformerEngine module's FP8 state: TE unpickles the bytes inside it itself


def _check_objects(path: Path, meta: Any) -> None:
    """Refuse a checkpoint whose pickled objects hold anything no checkpoint holds. megatron-core unpickles them
    on every rank through torch's DCP planner (``torch.load(weights_only=False)``); here each is run through mtk's
    reader, its tensors checked but not read — except a module's FP8 extra state, whose bytes TransformerEngine
    unpickles itself: those are read and run through the reader too. A damaged one is CheckpointDamaged."""
    for key, rel, offset, length in _objects(path, meta):
        shard = path / rel
        where = str(path if key == COMMON_KEY else shard)
        try:
            with open_inside(path, rel, str(path / ".metadata")) as fh:
                fh.seek(offset)
                raw: IO[bytes] = (io.BytesIO(fh.read(length)) if length < _SLICE_READ
                                  else io.BufferedReader(_Slice(fh, offset, length)))
                if EXTRA_STATE in key:
                    state = checkpoint_unpickle.load_torch(raw, where, _what(key))
                    checkpoint_unpickle.check_extra_state(state, where)
                else:
                    checkpoint_unpickle.scan_torch(raw, where, _what(key))
        except _UNSAFE as exc:
            raise CheckpointUnsafe(str(exc)) from None
        except (CheckpointDamagedPickle, OSError) as exc:  # the ranks would die of it: one line here, none there
            raise CheckpointDamaged(_damaged(exc)) from None


_SLICE_READ = 1 << 20  # a larger object (a dp_reshardable optimizer's state) is read in place: its pickle only


class _Slice(ByteWindow):
    """``length`` bytes of ``fh`` from ``offset``, seekable, so zipfile reads one member without the rest."""

    def __init__(self, fh: Any, offset: int, length: int) -> None:
        super().__init__(length)
        self.fh, self.offset = fh, offset

    def read_at(self, pos: int, n: int) -> bytes:
        self.fh.seek(self.offset + pos)
        return self.fh.read(n)


def read_common_state(path: Path) -> dict[str, Any] | None:
    """The checkpoint's common (non-tensor) state — Megatron-LM's ``args``, ``content_metadata``, mtk's
    extras — read with torch alone, admitting only the globals checkpoints hold (CheckpointDamaged naming the
    file and the global otherwise, or naming a damaged file); None when it is not there or not a dict."""
    _not_a_link(path)
    legacy = path / "common.pt"
    where = str(legacy)
    raw: bytes | None = None
    try:
        if os.path.lexists(legacy):  # megatron-core reads this one first when it exists
            with open_inside(path, "common.pt", str(path)) as fh:
                raw = fh.read()
        else:
            if not os.path.lexists(path / ".metadata"):
                return None  # not a torch_dist checkpoint: _check_shards names it, the ranks decide
            meta = read_metadata(path)
            where = str(path)
            for key, rel, offset, length in _objects(path, meta):
                if key == COMMON_KEY:
                    try:
                        with open_inside(path, rel, str(path / ".metadata")) as fh:
                            fh.seek(offset)
                            raw = fh.read(length)
                    except OSError:
                        return None  # _check_shards names a missing shard
            if raw is None:
                return None  # not megatron-core's layout: the ranks decide
        common = checkpoint_unpickle.load_torch(raw, where, "common state")
    except _UNSAFE as exc:
        raise CheckpointUnsafe(str(exc)) from None
    except CheckpointDamagedPickle as exc:
        raise CheckpointDamaged(_damaged(exc)) from None
    except CheckpointDamaged:
        raise
    except OSError:
        return None  # _check_shards names a missing or unreadable file
    if isinstance(common, list) and common:  # saved as a one-element list by megatron-core
        common = common[0]
    return common if isinstance(common, dict) else None


def _check_shards(path: Path) -> None:
    metadata = path / ".metadata"
    if not os.path.lexists(metadata):
        raise CheckpointDamaged(f"{metadata} is missing: {path} is not a complete torch_dist checkpoint; "
                                "point the tracker at another iter_* dir or delete it")
    meta = read_metadata(path)
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        rel = getattr(info, "relative_path", None)
        if rel is not None:
            need[rel] = max(need.get(rel, 0), int(info.offset) + int(info.length))
    try:
        sizes = sizes_inside(path, sorted(need), str(metadata))
    except ShardPathRefused as exc:
        raise CheckpointUnsafe(str(exc)) from None
    for rel, size in sorted(need.items()):
        shard = path / rel
        have = sizes[rel]
        if have is None:
            raise CheckpointDamaged(f"{shard} is missing (listed in {metadata}); the checkpoint is incomplete")
        if have < size:
            raise CheckpointDamaged(f"{shard} is {have} bytes but {metadata} places data up to byte {size}: the "
                                    "shard is truncated — restore it, or point the tracker at an earlier iter_* dir")
    legacy = path / "common.pt"
    if os.path.lexists(legacy):
        try:
            with open_inside(path, "common.pt", str(path)) as fh:
                checkpoint_unpickle.scan_torch(fh, str(legacy), "common state")
        except _UNSAFE as exc:
            raise CheckpointUnsafe(str(exc)) from None
        except (CheckpointDamagedPickle, OSError) as exc:
            raise CheckpointDamaged(_damaged(exc)) from None
    _check_objects(path, meta)


def _damaged(exc: Exception) -> str:
    said = str(exc) if isinstance(exc, CheckpointDamagedPickle) else f"{type(exc).__name__}: {exc}"
    return f"{said}; the checkpoint is damaged — restore it, or point the tracker at another iter_* dir"
