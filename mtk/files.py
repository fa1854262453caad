"""File helpers every folder may use (the neutral core: imports nothing of mtk). Run files are written
temp-then-rename so a reader never sees half a file.

Run dirs, checkpoint dirs and data dirs are often shared (a group-writable runs dir on FSx, a team's dataset
prefix): another user may plant a file or a symlink at a name mtk is about to write. So a writer here never opens
an existing name for writing: a temp file is created new (``O_EXCL|O_NOFOLLOW``, under a name nobody can guess)
and renamed over the target, which replaces a planted link rather than writing through it; a file appended to is
opened ``O_NOFOLLOW``; what a library writes by path goes into a private (0700) folder first.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def cache_root() -> Path:
    """mtk's own cache on this machine: ``$MTK_CACHE_DIR`` when set (a shared cache for a team, or one per CI job),
    else ``$XDG_CACHE_HOME/mtk`` (``~/.cache`` when unset or relative, as the XDG spec says)."""
    own = os.environ.get("MTK_CACHE_DIR", "")
    if os.path.isabs(own):
        return Path(own)
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "mtk"


def current_umask() -> int:
    """The process umask, read without changing it (os.umask can only be read by setting it, which races other
    threads' file creation). Linux's /proc/self/status says it; psutil has no umask, and this runs in the CLI too
    (the plain install has no psutil). Elsewhere: set and restore."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def create_new(path: str | Path, mode: int = 0o644) -> int:
    """A descriptor for writing ``path``, which must not exist: a file or a symlink already there (another user's,
    in a shared folder) is FileExistsError, never truncated or followed. ``mode`` is filtered through the umask."""
    return os.open(path, _NEW, mode)


def temp_beside(dest: str | Path, mode: int = 0o644) -> tuple[int, Path]:
    """A new temp file in ``dest``'s folder, ``.<name>.<random>.tmp``, and its descriptor: created with
    :func:`create_new` under a name nobody can guess or take first (a taken name is skipped)."""
    dest = Path(dest)
    for _ in range(100):
        tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.tmp")
        try:
            return create_new(tmp, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {dest} after 100 tries")


@contextlib.contextmanager
def replacing(dest: str | Path, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """A binary file to fill; when the block ends it is renamed over ``dest`` (a symlink planted at ``dest`` is
    replaced, not followed); on an error it is removed and ``dest`` is untouched. The folder must exist."""
    fd, tmp = temp_beside(dest, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(dest: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write to a temp file in the same directory, then rename over ``dest`` (:func:`replacing`). ``mode`` is
    filtered through the umask like any created file, so ``umask 077`` keeps run files private."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with replacing(dest, mode) as fh:
        fh.write(text.encode() if isinstance(text, str) else text)


def open_nofollow(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)`` for a file this user keeps in a shared folder (a log appended to, a
    lock file): opening through a symlink planted there would write to, or create, whatever file it names. A link
    found at the name is removed (as a rename over it would replace it) and the file created new (``O_EXCL``)."""
    flags |= NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP or not flags & os.O_CREAT:
            raise
    os.unlink(path)  # the link itself, not what it names
    return os.open(path, flags | os.O_EXCL, mode)


def open_append(path: str | Path, mode: int = 0o644, binary: bool = False, buffering: int = -1) -> IO[Any]:
    """``path`` opened to append, created if missing, never through a symlink (:func:`open_nofollow`)."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    return os.fdopen(fd, "ab" if binary else "a", buffering=buffering)


@contextlib.contextmanager
def written_by_path(dest: str | Path) -> Iterator[Path]:
    """For a library that writes a file by its path (a profiler trace, safetensors): the path to give it, in a
    private (0700) folder beside ``dest`` that nobody else can enter, so it cannot be made to follow a planted
    link; renamed over ``dest`` when the block ends without error. Its mode is the umask's, as for any file."""
    dest = Path(dest)
    folder = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".d"))
    try:
        inner = folder / dest.name
        yield inner
        fd = os.open(inner, os.O_RDONLY | NOFOLLOW)
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
        finally:
            os.close(fd)
        os.replace(inner, dest)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def open_mode(folder: str | Path) -> None:
    """Give a folder made private (0700 while it is filled) the mode a new folder gets under the umask, through a
    descriptor (a chmod by path would follow a link swapped in for it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        os.fchmod(fd, 0o777 & ~current_umask())
    finally:
        os.close(fd)


class ByteWindow(io.RawIOBase):
    """A seekable, read-only view of ``length`` bytes that a subclass fetches on demand (``read_at``): a member of
    a larger file, a ranged GET of an S3 object. Wrap it in ``io.BufferedReader`` for small reads."""

    def __init__(self, length: int) -> None:
        self.length, self.pos = length, 0

    def read_at(self, pos: int, n: int) -> bytes:
        raise NotImplementedError

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), self.length - self.pos)
        if want <= 0:
            return 0
        data = self.read_at(self.pos, want)
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)
