"""Check the checkpoint a run will resume from, once, before torchrun starts any rank.

A garbage tracker, a missing ``iter_N`` or a truncated shard otherwise surfaces as one traceback per rank,
deep inside the load, with the file name buried or absent. Here each is one message naming the file and the
fix, and the step exits with the bad-input code. Reads only the tracker, the directory listing, the torch
distributed-checkpoint ``.metadata``, file sizes and the small common state (never the tensors).

A resume at a layout the checkpoint cannot be loaded at (``mtk.training.reshard``: a changed model shape, a
``dp_reshardable`` distributed optimizer at another tp/pp, ...) is refused here too, naming the spec field,
before torchrun spends minutes starting ranks. The common state is unpickled without importing megatron
(seconds per node otherwise): megatron's own classes in it (rerun-state enums) become inert stand-ins.
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from mtk.checkpoint_paths import TRACKER, checkpoint_dir
from mtk.exitcodes import BadInput

RELEASE = "release"


class CheckpointDamaged(BadInput, ValueError):
    """The checkpoint to resume from cannot be loaded; the message names the file."""


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
    try:
        raw = tracker.read_bytes()
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise CheckpointDamaged(f"{tracker} is a directory; remove it to start from scratch") from None
    text = raw.decode("utf-8", errors="replace").strip()
    if text == RELEASE:  # Megatron-LM's weights-only checkpoint in <root>/release
        path = root / RELEASE
        if not path.is_dir():
            raise CheckpointDamaged(f"{tracker} names {RELEASE} but {path} is missing: restore it, or point the "
                                    "tracker at a complete iter_* dir, or delete the tracker")
        _check_shards(path)
        _check_layout(job, path, release=True)
        return
    if not text.isdigit():
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise CheckpointDamaged(f"{tracker} holds {shown!r}, not an iteration number: write the iteration of a "
                                f"complete iter_* dir in {root} into it, or delete it to start from scratch")
    path = root / f"iter_{int(text):07d}"
    if not path.is_dir():
        raise CheckpointDamaged(f"{tracker} names iteration {int(text)} but {path} is missing: restore it, or point "
                                "the tracker at another complete iter_* dir, or delete the tracker")
    _check_shards(path)
    _check_layout(job, path, release=False)


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


class _Inert:
    """Stands in for a class of megatron's in the common state: takes any constructor arguments and state."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "megatron":
            return type(name, (_Inert,), {"__module__": module})
        return super().find_class(module, name)


class _StubbingPickle:
    """A ``pickle_module`` for ``torch.load``: megatron's classes become inert stand-ins."""

    Unpickler = _Unpickler
    __name__ = "mtk_stubbing_pickle"

    @staticmethod
    def load(file: Any, **kwargs: Any) -> Any:
        return _Unpickler(file, **kwargs).load()


def read_common_state(path: Path) -> dict[str, Any] | None:
    """The checkpoint's common (non-tensor) state — Megatron-LM's ``args``, ``content_metadata``, mtk's
    extras — read with torch alone; None when it is not there or not a dict."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader, load
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    legacy = path / "common.pt"
    raw: bytes | None
    if legacy.is_file():
        raw = legacy.read_bytes()
    else:
        found: dict[str, bytes] = {}

        class RawBytes(DefaultLoadPlanner):  # keep the stored bytes; torch would unpickle them with megatron
            def load_bytes(self, read_item, value) -> None:
                found[read_item.dest_index.fqn] = value.read()

        reader = FileSystemReader(str(path))
        if COMMON_KEY not in reader.read_metadata().state_dict_metadata:
            return None  # not megatron-core's layout: the ranks decide
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process": it is
                load({COMMON_KEY: io.BytesIO()}, storage_reader=reader, planner=RawBytes(), no_dist=True)
        except (Exception, CheckpointException):  # torch's CheckpointException is a BaseException
            return None
        raw = found.get(COMMON_KEY)
        if raw is None:
            return None
    try:
        common = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False, pickle_module=_StubbingPickle)
    except Exception:
        return None
    if isinstance(common, list) and common:  # saved as a one-element list by megatron-core
        common = common[0]
    return common if isinstance(common, dict) else None


def _check_shards(path: Path) -> None:
    metadata = path / ".metadata"
    if not metadata.is_file():
        raise CheckpointDamaged(f"{metadata} is missing: {path} is not a complete torch_dist checkpoint; "
                                "point the tracker at another iter_* dir or delete it")
    try:
        from torch.distributed.checkpoint import FileSystemReader

        meta = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # pickle/torch errors on a damaged file: name the file, not the internals
        raise CheckpointDamaged(f"{metadata} cannot be read ({type(exc).__name__}: {exc}); the checkpoint is "
                                "damaged — point the tracker at another iter_* dir or delete it") from None
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        rel = getattr(info, "relative_path", None)
        if rel is not None:
            need[rel] = max(need.get(rel, 0), int(info.offset) + int(info.length))
    for rel, size in sorted(need.items()):
        shard = path / rel
        have = shard.stat().st_size if shard.is_file() else None
        if have is None:
            raise CheckpointDamaged(f"{shard} is missing (listed in {metadata}); the checkpoint is incomplete")
        if have < size:
            raise CheckpointDamaged(f"{shard} is {have} bytes but {metadata} places data up to byte {size}: the "
                                    "shard is truncated — restore it, or point the tracker at an earlier iter_* dir")
