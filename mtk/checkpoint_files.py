"""Open a file a checkpoint's ``.metadata`` names, inside the checkpoint dir and nowhere else.

DCP's ``.metadata`` names each shard by a path relative to the checkpoint dir, and whoever can write the dir writes
that path: ``../../etc/shadow``, ``/etc/shadow``, or a plain name that is a symbolic link placed beside the shards.
Here a shard path is refused by name unless it is relative, plain (no ``..``, no empty part) and each of its parts is
a real directory or regular file under the dir: the walk opens each part relative to its parent with
``O_NOFOLLOW`` (no link is ever followed, so nothing outside the dir is opened or stat'ed, and no check-then-open
race), and the file is read through the descriptor it checked. The checkpoint dir itself is the one the user or
the tracker named; it is opened as given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

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
