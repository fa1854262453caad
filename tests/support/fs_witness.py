"""Record which files a piece of code opens or stats, to show that nothing outside a dir was touched.

Every open and stat in Python ends in ``os.open``, ``io.open`` (``open``, ``Path.open``, ``read_bytes``), ``os.stat``
or ``os.lstat`` (``Path.stat``/``is_file``/``is_dir``/``exists``, ``os.path.*``): each is wrapped to record the path
it reaches — the name joined to its ``dir_fd``'s directory, and through any link when the call follows links — before
calling the real one."""

from __future__ import annotations

import builtins
import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path


def _reached(path: object, dir_fd: int | None, follows: bool) -> str | None:
    if isinstance(path, int):
        return None  # an fd: already open
    text = os.fsdecode(os.fspath(path))  # type: ignore[arg-type]
    if dir_fd is not None and not os.path.isabs(text):
        text = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), text)
    text = os.path.abspath(text)
    if not follows:  # the last part is not followed; its parent dirs are
        return os.path.join(os.path.realpath(os.path.dirname(text)), os.path.basename(text))
    return os.path.realpath(text)


@contextlib.contextmanager
def touched() -> Iterator[list[str]]:
    """Yields the list the wrapped calls append to: each path opened or stat'ed, as the kernel resolves it."""
    seen: list[str] = []
    real_open, real_stat, real_lstat, real_io_open = os.open, os.stat, os.lstat, io.open
    busy = [False]  # resolving a path stats too: those are the witness's own, not recorded

    def record(path: object, dir_fd: int | None, follows: bool) -> None:
        if busy[0] or isinstance(path, int):
            return
        busy[0] = True
        try:
            seen.append(_reached(path, dir_fd, follows) or "")
        finally:
            busy[0] = False

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        record(path, dir_fd, not flags & os.O_NOFOLLOW)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def os_stat(path, *, dir_fd=None, follow_symlinks=True):
        record(path, dir_fd, follow_symlinks)
        return real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def os_lstat(path, *, dir_fd=None):
        record(path, dir_fd, False)
        return real_lstat(path, dir_fd=dir_fd)

    def io_open(file, *args, **kwargs):
        record(file, None, True)
        return real_io_open(file, *args, **kwargs)

    os.open, os.stat, os.lstat = os_open, os_stat, os_lstat  # type: ignore[assignment]
    io.open = builtins.open = io_open  # type: ignore[assignment]
    try:
        yield seen
    finally:
        os.open, os.stat, os.lstat = real_open, real_stat, real_lstat  # type: ignore[assignment]
        io.open = builtins.open = real_io_open  # type: ignore[assignment]


def inside(seen: list[str], outside: Path) -> list[str]:
    """The recorded paths that lie in ``outside`` (resolved)."""
    base = os.path.realpath(outside)
    return [p for p in seen if p == base or p.startswith(base + os.sep)]
