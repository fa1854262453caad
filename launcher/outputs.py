"""Where a launch will write, checked before anything is submitted: an unwritable runs_dir or checkpoint dir
otherwise fails at the first save, on every rank; a dry run must never overwrite an existing run's record.

Why a probe file and not only ``os.access``: access(2) answers from permission bits and mount flags, but a
full filesystem, an exhausted quota, or a server that squashes or maps the user differently (NFS, Lustre/FSx,
FUSE mounts of object stores) say yes there and no at the first ``write``. Creating, writing, syncing and
removing a small file is the question the first checkpoint save will ask, asked now. A dry run touches none
of the cluster's paths, so it keeps to ``os.access``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from mtk.spec.errors import Problem, SpecError

if TYPE_CHECKING:
    from mtk.spec import Job

PROBE_BYTES = 4096  # one block: an empty file needs no space, a checkpoint does
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_WHY = {
    errno.EROFS: "is on a read-only filesystem: choose a location on a writable mount",
    errno.ENOSPC: "is on a full filesystem (no space left): free space there or choose another location",
    errno.EDQUOT: "is over your disk quota: free space there or choose another location",
}


def _nearest_existing(path: str) -> tuple[Path, Problem | None]:
    p = Path(path)
    while not p.exists() and p != p.parent:
        if p.is_symlink():  # a dangling link
            return p, Problem("", f"{p} is a dangling symlink; fix or remove it")
        p = p.parent
    return p, None


def _denied(p: Path) -> str:
    return (f"{p} is not writable by this user (uid {os.getuid()}): choose a location you can write, or have "
            "its owner grant you write access")


def _probe(p: Path) -> str | None:
    """Create, fill, sync and remove a file in ``p``; the reason it failed, or None."""
    name = p / f".mtk-write-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except OSError as exc:
        return _reason(p, exc)
    try:
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return _reason(p, exc)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def _reason(p: Path, exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _denied(p)
    if exc.errno in _WHY:
        return f"{p} {_WHY[exc.errno]}"
    return f"{p}: cannot create a file there ({exc.strerror or exc}): choose another location"


def _blocked(path: str, dry_run: bool) -> tuple[Path, str] | None:
    """The nearest existing ancestor of ``path`` and why this user cannot create entries in it, or None."""
    p, dangling = _nearest_existing(path)
    if dangling:
        return p, dangling.message
    if not p.is_dir():
        return p, f"{p} is a file, not a directory: choose another location"
    if not os.access(p, os.W_OK | os.X_OK):
        return p, f"{p} {_WHY[errno.EROFS]}" if _read_only(p) else _denied(p)
    if dry_run:
        return None
    reason = _probe(p)
    return (p, reason) if reason else None


def _read_only(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_launch_outputs(job: Job, backend: str, run_dir: str, dry_run: bool) -> None:
    problems = []
    if dry_run and (Path(run_dir) / "job.json").exists():
        problems.append(Problem("--run-dir", "holds an existing run (job.json): a dry run writes nothing into it; "
                                "pass a new --run-dir or leave it out", run_dir))
    from mtk.backends import backend_class

    if not backend_class(backend).remote_paths:  # e.g. EKS paths are pod paths on FSx, not visible here
        reported: dict[Path, Problem] = {}
        for path, field in ((job.cluster.runs_dir, "cluster.runs_dir"), (run_dir, "--run-dir"),
                            (job.train.checkpoint.dir or "", "train.checkpoint.dir")):
            blocked = _blocked(path, dry_run) if path else None
            if blocked is None:
                continue
            where, reason = blocked
            if where in reported:  # one cause, one message: the first field that hits it names it
                continue
            reported[where] = Problem(field, reason, path)
        problems.extend(reported.values())
    if problems:
        raise SpecError(problems)
