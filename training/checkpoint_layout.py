"""The on-disk layout of a checkpoint dir, and publishing into it with an atomically updated tracker.

Layout of the checkpoint dir (``train.checkpoint.dir``: a launch sets it, by default to
``<runs_dir>/<name>/checkpoints``; see :mod:`mtk.checkpoint_paths`)::

    iter_0000010/                     a published checkpoint (model, optimizer, scheduler, RNG, data position)
    iter_0000020.partial/             being written; never read; removed at the next start
    latest_checkpointed_iteration.txt the iteration to resume from (Megatron's tracker name and format)

Publishing order: every rank writes its shards into ``iter_N.partial`` → barrier → rank 0 renames it to
``iter_N`` → rank 0 replaces the tracker (temp file + ``os.replace``) → barrier. A crash at any point before
the tracker is replaced leaves the tracker naming the previous, complete checkpoint.

What readers of a checkpoint need without the engine (export, reshard, the tokenizer record) lives here; writing
and loading the state is :mod:`mtk.training.checkpoint`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from mtk.checkpoint_files import RELEASE as RELEASE  # re-exported: the tracker's reader is the core's
from mtk.checkpoint_files import TrackerUnreadable as TrackerUnreadable
from mtk.checkpoint_files import read_tracker as read_tracker_text
from mtk.checkpoint_paths import TRACKER
from mtk.exitcodes import BadInput
from mtk.files import atomic_write, open_mode

# mtk's namespace in a checkpoint's common state (Megatron-LM ignores keys it does not know).
MTK_KEY = "mtk"
PARTIAL_SUFFIX = ".partial"
_ITER_DIR = re.compile(r"^iter_([0-9]{7,})$")  # ASCII digits: int() of some Unicode digits fails


class CheckpointNotFound(BadInput, FileNotFoundError):
    """A checkpoint the user named, or the one its tracker names, is not there: the message says which (exit 2)."""


def iter_dir_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def read_tracker_entry(root: str | Path) -> str | None:
    """The tracker's content: an iteration number, ``release`` (Megatron-LM's weights-only checkpoints in
    ``<root>/release``), or None when there is no tracker (:func:`mtk.checkpoint_files.read_tracker`: never through
    a link, never more than a few bytes; TrackerUnreadable otherwise)."""
    return read_tracker_text(root)


def read_tracker(root: str | Path) -> int | None:
    """The published iteration (0 for a ``release`` checkpoint), or None when there is no tracker."""
    entry = read_tracker_entry(root)
    if entry is None:
        return None
    return 0 if entry == RELEASE else int(entry)


def tracked_checkpoint(root: str | Path) -> tuple[Path, int, bool] | None:
    """(directory, iteration, is_release) of the checkpoint the tracker names, or None without a tracker."""
    root = Path(root)
    entry = read_tracker_entry(root)
    if entry is None:
        return None
    if entry == RELEASE:
        path, iteration, release = root / RELEASE, 0, True
    else:
        path, iteration, release = root / iter_dir_name(int(entry)), int(entry), False
    if path.is_symlink():  # every read below it would go where the link points (docs/security.md)
        from .checkpoint_guard import CheckpointUntrusted

        raise CheckpointUntrusted(f"{path} is a symbolic link; a checkpoint's iteration dir is a plain dir — refusing "
                                  "to follow it (replace it with the checkpoint itself, or delete the tracker)")
    if not path.is_dir():
        raise CheckpointNotFound(f"{root / TRACKER} names {entry} but {path} is missing; restore it or delete "
                                f"the tracker to start from scratch")
    return path, iteration, release


def resolve_checkpoint_dir(path: str | Path) -> tuple[Path, int, bool]:
    """A checkpoint given by the user: a root with a tracker, or one ``iter_N``/``release`` dir itself."""
    path = Path(path)
    found = tracked_checkpoint(path)
    if found is not None:
        return found
    if (path / "metadata.json").is_file():
        m = _ITER_DIR.match(path.name)
        return path, int(m.group(1)) if m else 0, path.name == RELEASE
    raise CheckpointNotFound(f"{path} is neither a checkpoint directory with {TRACKER} nor a torch_dist "
                            f"checkpoint (iter_N/ or release/ with metadata.json)")


def published_iterations(root: str | Path) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _ITER_DIR.match(p.name)))


def remove_partials(root: str | Path) -> list[Path]:
    """Delete ``*.partial`` dirs left by a crash during save. Rank 0 only, before anyone saves."""
    root = Path(root)
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.endswith(PARTIAL_SUFFIX):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def prune(root: str | Path, keep_last: int | None, protect: int | None) -> list[int]:
    """Remove all but the newest ``keep_last`` published checkpoints (never the tracked one)."""
    if not keep_last:
        return []
    iters = published_iterations(root)
    doomed = [i for i in iters[:-keep_last] if i != protect]
    for i in doomed:
        shutil.rmtree(Path(root) / iter_dir_name(i), ignore_errors=True)
    return doomed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(root: str | Path, iteration: int) -> Path:
    """Rename ``iter_N.partial`` to ``iter_N`` and point the tracker at it (rank 0, after all shards)."""
    root = Path(root)
    partial = root / (iter_dir_name(iteration) + PARTIAL_SUFFIX)
    final = root / iter_dir_name(iteration)
    if final.exists():  # a re-save of the same iteration (e.g. after a resume): replace it
        shutil.rmtree(final)
    open_mode(partial)  # written private (CheckpointManager.begin): readable as the umask says once published
    os.replace(partial, final)
    _fsync_dir(root)
    atomic_write(root / TRACKER, f"{iteration}\n")
    _fsync_dir(root)
    return final


# --------------------------------------------------------------------------- state dicts
