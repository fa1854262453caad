"""File helpers every folder may use (the neutral core: imports nothing of mtk). Run files are written
temp-then-rename so a reader never sees half a file."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any


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


def atomic_write(dest: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write to a temp file in the same directory, then rename over ``dest``. ``mode`` is filtered through
    the umask like any created file, so ``umask 077`` keeps run files private."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode() if isinstance(text, str) else text)
        os.chmod(tmp, mode & ~current_umask())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
