"""How benchmarks/scale_fs.py counts shared-filesystem operations: in-process (an audit hook plus an ``os.stat``
wrapper) and from strace's log of the same process, both bracketed by per-part marker calls."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter
from pathlib import Path

MARK = ".scale-mark-"
SYSCALLS = ("openat,open,read,pread64,write,pwrite64,rename,renameat,renameat2,stat,lstat,newfstatat,statx,fstat,"
            "access,faccessat,faccessat2,getdents64,unlink,unlinkat,rmdir,mkdir,mkdirat,chmod,fchmod,fchmodat,"
            "fsync,fdatasync")
KIND = {"openat": "open", "open": "open", "read": "read", "pread64": "read", "write": "write", "pwrite64": "write",
        "rename": "rename", "renameat": "rename", "renameat2": "rename", "getdents64": "listdir",
        "unlink": "unlink", "unlinkat": "unlink", "rmdir": "unlink", "mkdir": "mkdir", "mkdirat": "mkdir",
        "fsync": "fsync", "fdatasync": "fsync"}


class AuditCount:
    """Operations on paths under ``root`` while ``on``; installed once per process (audit hooks cannot go)."""

    def __init__(self) -> None:
        self.root = ""
        self.on = False
        self.counts: Counter[str] = Counter()

    def install(self) -> None:
        sys.addaudithook(self._hook)
        real_stat = os.stat

        def counted_stat(path, *args, **kwargs):
            self._add("stat", path)
            return real_stat(path, *args, **kwargs)

        os.stat = counted_stat  # Path.exists/is_dir/stat and os.path.* look it up at call time

    def _add(self, kind: str, path) -> None:
        if self.on and isinstance(path, (str, bytes, os.PathLike)) and os.fsdecode(path).startswith(self.root):
            self.counts[kind] += 1

    def _hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event == "open":
            path, mode, flags = args
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
            self._add("open-write" if write else "open-read", path)
        elif event == "os.rename":
            self._add("rename", args[0])
        elif event in ("os.listdir", "os.scandir"):
            self._add("listdir", args[0] if args else ".")
        elif event in ("os.remove", "os.rmdir"):
            self._add("unlink", args[0])
        elif event == "os.mkdir":
            self._add("mkdir", args[0])

    def window(self, root: Path, name: str):
        """Count inside the ``with``; the strace markers bracket the same window."""
        return _Window(self, root, name)


class _Window:
    def __init__(self, audit: AuditCount, root: Path, name: str):
        self.audit, self.root, self.name = audit, root, name
        self.counts: Counter[str] = Counter()

    def __enter__(self):
        _mark(self.root, f"{self.name}-begin")
        self.audit.root, self.audit.counts, self.audit.on = str(self.root), Counter(), True
        return self

    def __exit__(self, *exc):
        self.audit.on = False
        self.counts = self.audit.counts
        _mark(self.root, f"{self.name}-end")


def _mark(root: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        os.lstat(root / f"{MARK}{name}")  # a failing lstat strace sees: where a window begins and ends


_LINE = re.compile(r"^\d+\s+(?:<\.\.\.\s+)?(\w+)\(")


def strace_counts(log: Path, roots: dict[str, str]) -> dict[str, Counter]:
    """System calls on each window's shared root, between its begin and end markers."""
    out: dict[str, Counter] = {k: Counter() for k in roots}
    by_root = {v: k for k, v in roots.items()}
    active: str | None = None
    with open(log, errors="replace") as fh:
        for line in fh:
            if MARK in line:
                for root, key in by_root.items():
                    if root in line:
                        active = key if line.rstrip().split(MARK)[-1].split('"')[0].endswith("-begin") else None
                continue
            if active is None or roots[active] not in line or "resumed>" in line:
                continue
            m = _LINE.match(line)
            if m:
                out[active][KIND.get(m.group(1), "stat" if "stat" in m.group(1) or "access" in m.group(1)
                                     else m.group(1))] += 1
    return out
