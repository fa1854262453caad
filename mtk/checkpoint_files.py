"""Open a file a checkpoint's ``.metadata`` names, inside the checkpoint dir and nowhere else.

DCP's ``.metadata`` names each shard by a path relative to the checkpoint dir, and whoever can write the dir writes
that path: ``../../etc/shadow``, ``/etc/shadow``, or a plain name that is a symbolic link placed beside the shards.
Here a shard path is refused by name unless it is relative, plain (no ``..``, no empty part) and each of its parts is
a real directory or regular file under the dir: the walk opens each part relative to its parent with
``O_NOFOLLOW`` (no link is ever followed, so nothing outside the dir is opened or stat'ed, and no check-then-open
race), and the file is read through the descriptor it checked. The checkpoint dir itself is the one the user or
the tracker named; it is opened as given.

The tracker (``latest_checkpointed_iteration.txt``) is read the same way by everyone who reads it — the launch, the
resume precheck, every rank — through :func:`read_tracker`: never through a link, never past a few bytes.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from mtk.checkpoint_paths import TRACKER
from mtk.exitcodes import BadInput


class ShardPathRefused(BadInput, ValueError):
    """A checkpoint names a file outside its dir (or through a link): nothing outside was opened."""


def check_relative(rel: object, root: str | os.PathLike, named_in: str) -> list[str]:
    """The parts of a shard path ``named_in`` a file gives; ShardPathRefused unless it stays inside ``root``."""
    if type(rel) is not str or not rel or "\0" in rel:
        raise ShardPathRefused(f"{named_in}: names a shard path {rel!r} that is not a file name; refusing to load "
                               "the checkpoint (restore it from a copy you trust)")
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ShardPathRefused(f"{named_in}: shard path {rel!r} leaves the checkpoint dir {root}; refusing to open "
                               "anything outside it (restore the checkpoint from a copy you trust)")
    return parts


def _refuse_link(root: str | os.PathLike, rel: str, named_in: str) -> ShardPathRefused:
    return ShardPathRefused(f"{named_in}: shard path {rel!r} in {root} is a symbolic link or not a regular file; "
                            "a checkpoint's files are plain files inside its dir — refusing to follow it (restore "
                            "the checkpoint from a copy you trust)")


def open_inside(root: str | os.PathLike, rel: str, named_in: str) -> BinaryIO:
    """``root/rel`` opened for reading without following any link under ``root``; ShardPathRefused when ``rel``
    leaves it, passes through a link or is not a regular file; FileNotFoundError when it is missing."""
    parts = check_relative(rel, root, named_in)
    flags = os.O_RDONLY | os.O_CLOEXEC
    here = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, flags | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            except FileNotFoundError:
                raise
            except OSError:  # ELOOP or ENOTDIR: a link, or a file where a directory is named
                raise _refuse_link(root, rel, named_in) from None
            os.close(here)
            here = inner
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=here)
        except FileNotFoundError:
            raise
        except OSError:  # ELOOP: a link
            raise _refuse_link(root, rel, named_in) from None
    finally:
        os.close(here)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refuse_link(root, rel, named_in)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def sizes_inside(root: str | os.PathLike, rels: list[str], named_in: str) -> dict[str, int | None]:
    """The size of each ``root/rel`` (None when missing), checked as :func:`open_inside` checks but without opening
    the files: one ``lstat`` relative to its (link-free) dir each, as many filesystem operations as a plain stat."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY
    dirs: dict[tuple[str, ...], int] = {}
    sizes: dict[str, int | None] = {}
    try:
        dirs[()] = os.open(root, flags)
        for rel in rels:
            parts = check_relative(rel, root, named_in)
            try:
                for depth in range(1, len(parts)):
                    if tuple(parts[:depth]) not in dirs:
                        try:
                            dirs[tuple(parts[:depth])] = os.open(parts[depth - 1], flags | os.O_NOFOLLOW,
                                                                 dir_fd=dirs[tuple(parts[:depth - 1])])
                        except FileNotFoundError:
                            raise
                        except OSError:
                            raise _refuse_link(root, rel, named_in) from None
                st = os.stat(parts[-1], dir_fd=dirs[tuple(parts[:-1])], follow_symlinks=False)
            except FileNotFoundError:
                sizes[rel] = None
                continue
            if not stat.S_ISREG(st.st_mode):
                raise _refuse_link(root, rel, named_in)
            sizes[rel] = st.st_size
    finally:
        for fd in dirs.values():
            os.close(fd)
    return sizes


def path_inside(root: str | os.PathLike, rel: str, named_in: str) -> Path:
    """``root/rel`` for messages, after checking ``rel`` stays inside ``root`` (its text only)."""
    check_relative(rel, root, named_in)
    return Path(root) / rel


RELEASE = "release"  # Megatron-LM's weights-only checkpoint, in <root>/release
TRACKER_MAX = 64  # bytes: a tracker holds an iteration number (or "release") and a newline
_ITERATION = re.compile(r"[0-9]{1,18}")  # ASCII digits only ('²'.isdigit() is True), below 10**18


class TrackerUnreadable(BadInput, ValueError):
    """A checkpoint dir's tracker that holds no iteration number (nor ``release``), or is a link, a directory or
    another special file: named, with the fix (exit 2). ``unsafe``: a link or a special file, never followed."""

    def __init__(self, message: str, unsafe: bool = False) -> None:
        super().__init__(message)
        self.unsafe = unsafe


def read_tracker(root: str | os.PathLike) -> str | None:
    """The entry of ``root``'s tracker: an iteration number (ASCII digits) or ``release``; None when there is none.
    Opened without following a link, refused unread when it is not a small regular file (a tracker is a few bytes;
    a 1 GiB one, or a link to a file outside the dir, is never read)."""
    path = Path(root) / TRACKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):  # ELOOP: lstat of the name alone, nothing followed
            raise TrackerUnreadable(f"{path} is a symbolic link; refusing to follow it (write the iteration to resume "
                                    "from into a plain file, or delete it)", unsafe=True) from None
        raise TrackerUnreadable(f"{path} cannot be read ({exc.strerror}); fix or delete it") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise TrackerUnreadable(f"{path} is a directory; remove it to start from scratch")
        if not stat.S_ISREG(st.st_mode):
            raise TrackerUnreadable(f"{path} is a symbolic link or not a regular file; refusing to follow it (write "
                                    "the iteration to resume from into a plain file, or delete it)", unsafe=True)
        if st.st_size > TRACKER_MAX:
            raise TrackerUnreadable(f"{path} is {st.st_size} bytes, not an iteration number or 'release': fix or "
                                    "delete it (a tracker names the iter_* dir to resume from in a few bytes)")
        raw = os.read(fd, TRACKER_MAX + 1)
    finally:
        os.close(fd)
    text = raw.decode("utf-8", errors="replace").strip()
    if text == RELEASE or _ITERATION.fullmatch(text):
        return text
    shown = text if len(text) <= 40 else text[:40] + "..."
    raise TrackerUnreadable(f"{path} holds {shown!r}, not an iteration number or 'release': fix or delete it (it "
                            "names the iter_* dir to resume from; without it training starts from scratch)")
