"""One writer per checkpoint dir: a lease file that names the run holding it (host, pid, job id, run dir).

Two runs pointed at one checkpoint dir (two launches of one job name at once, or a copied spec) would each
delete the other's ``*.partial`` saves at start and publish over each other's tracker. ``mtk launch`` takes the
lease for its run before anything is submitted (:func:`claim`: so of two launches started together one goes on and
the other is refused at once), hands it to what it submitted (:func:`hand_over`: the local runner's pid, or the
scheduler's job), and rank 0 of that run takes it over before touching the dir; a second writer is refused with
the first one's name. The lease is given back at exit; one left by a dead process is taken over when its owner is
provably gone (same host, pid not running), when it belongs to the same run dir (a requeued or successor job of
the same run: Slurm runs those one at a time), or when the holder's scheduler no longer knows its job. Anything
else is refused with the fix: stop that run, or delete the lease file if its node is gone.

Every change is atomic on a shared filesystem too: a new lease appears whole (a temp file hard-linked into place,
which fails when one exists; ``O_EXCL`` where there are no hard links), and a takeover or hand-over replaces the
exact lease it judged, under a short lock (a directory made with ``mkdir``), so two takers cannot both win.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import socket
import time
from pathlib import Path

from mtk.files import temp_beside
from mtk.processes import alive

from .refusal import Refused

LEASE = ".mtk-writer.json"


class LeaseHeld(Refused):
    """Another live run writes to this checkpoint dir (``holder``: its lease, when it could be read)."""

    def __init__(self, message: str, holder: dict | None = None) -> None:
        super().__init__(message)
        self.holder = holder or {}


def _holder_here(run_dir: str) -> dict:
    from mtk.rendezvous import node_place, scheduler_here

    job = node_place(os.environ).job_id or os.environ.get("HOSTNAME") or ""
    return {"host": socket.gethostname(), "pid": os.getpid(), "job_id": job, "scheduler": scheduler_here(os.environ),
            "run_dir": str(run_dir), "since": time.time()}


def _job_ended(holder: dict) -> bool:
    """True when the holder's scheduler says its job is no longer queued or running (False when it cannot tell).
    A lease written before leases named their scheduler asks every scheduler that can tell."""
    from mtk.rendezvous import job_ended

    scheduler = holder.get("scheduler")
    return job_ended(str(holder.get("job_id", "")), scheduler if isinstance(scheduler, str) else None)


def _stale(holder: dict, me: dict) -> bool:
    if holder.get("run_dir") == me["run_dir"]:
        return True  # the same run, restarted: its previous attempt is over
    if holder.get("claim") and holder.get("job_id") and holder.get("scheduler"):
        return _job_ended(holder)  # a launch's claim handed to a queued job: the launching process is long gone
    if holder.get("host") == me["host"]:
        return not alive(int(holder.get("pid", 0)))  # a zombie holds nothing
    return _job_ended(holder)  # e.g. a run whose node died, resumed on another


def _stale_or_damaged(holder: dict, me: dict) -> bool:
    try:
        return _stale(holder, me)
    except (TypeError, ValueError):  # a hand-edited lease (pid not a number): taken over, as unreadable ones are
        return True


def describe(holder: dict) -> str:
    job = f", job {holder['job_id']}" if holder.get("job_id") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(holder.get("since", 0)))
    return f"run {holder.get('run_dir')} (host {holder.get('host')}, pid {holder.get('pid')}{job}, since {since})"


TAKEOVER = LEASE + ".takeover"  # held (a directory) while a lease is replaced; a dead taker's is ignored
TAKEOVER_STALE_S = 30.0


def _read(path: Path) -> tuple[dict | None, bytes | None]:
    """(holder, the exact bytes judged) — (None, None) when there is no lease; ({}, bytes) when unreadable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    try:
        holder = json.loads(raw)
    except ValueError:
        return {}, raw
    return (holder if isinstance(holder, dict) else {}), raw


def _temp(path: Path, holder: dict) -> Path:
    fd, tmp = temp_beside(path)  # a new file: never through a link planted in the (shared) checkpoint dir
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(holder) + "\n")
    return tmp


def _create(path: Path, holder: dict) -> bool:
    """Make the lease with its whole content at once; False when one exists."""
    tmp = _temp(path, holder)
    try:
        try:
            os.link(tmp, path)
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):
                if os.stat(tmp).st_nlink == 2:  # NFS: the link was made and a retried call said EEXIST/failed
                    return True
            if isinstance(exc, FileExistsError):
                return False
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
        try:  # a filesystem without hard links: O_EXCL (readers of a half-written lease retry, see _acquire)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(holder) + "\n")
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def _locked(path: Path, wait_s: float = 5.0):
    """Hold ``<lease>.takeover`` (yields False when another process kept it past ``wait_s``)."""
    lock = path.with_name(TAKEOVER)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > TAKEOVER_STALE_S:  # its taker died mid-way
                    with contextlib.suppress(OSError):
                        os.rmdir(lock)
                    continue
            if time.monotonic() > deadline:
                yield False
                return
            time.sleep(0.02)
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(lock)


def _replace_if(path: Path, judged: bytes, holder: dict) -> bool:
    """Replace the lease with ``holder`` only if it still holds exactly ``judged`` (compare and swap)."""
    with _locked(path) as held:
        if not held:
            return False
        try:
            if path.read_bytes() != judged:
                return False
        except FileNotFoundError:
            return False
        tmp = _temp(path, holder)
        try:
            os.replace(tmp, path)
        except OSError:
            tmp.unlink()
            raise
        return True


def refusal(root: Path, holder: dict) -> str:
    """The one line a second writer gets: who holds the dir, and the three ways out."""
    return (f"checkpoint dir {root} is in use by {describe(holder)}; two writers would delete each other's saves. "
            f"Stop that run first, give this one its own train.checkpoint.dir, or delete {root / LEASE} if that "
            "run's node is gone")


def _acquire(root: Path, me: dict) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    path = root / LEASE
    unreadable_since = None
    for _ in range(200):
        if _create(path, me):
            return me
        holder, raw = _read(path)
        if holder is None or raw is None:
            continue  # given back meanwhile: create again
        if not holder:  # unreadable: half-written by an O_EXCL writer (wait a moment), or damaged (taken over)
            unreadable_since = unreadable_since or time.monotonic()
            if time.monotonic() - unreadable_since < 2.0:
                time.sleep(0.05)
                continue
        elif not _stale_or_damaged(holder, me):
            raise LeaseHeld(refusal(root, holder), holder)
        if _replace_if(path, raw, me):
            return me
    raise LeaseHeld(f"could not take the lease on {root} ({path} keeps changing): another run is starting there")


def acquire(root: str | Path, run_dir: str | Path) -> dict:
    """Take the lease on ``root`` for this process, or raise LeaseHeld naming the holder. Rank 0 only."""
    root = Path(root)
    me = _acquire(root, _holder_here(str(run_dir)))
    atexit.register(release, root, me)
    return me


def claim(root: str | Path, run_dir: str | Path) -> dict:
    """Take the lease for a run that ``mtk launch`` is about to submit into ``run_dir`` (this process holds it
    until :func:`hand_over`), or raise LeaseHeld naming the holder. A dead launch's claim is stale by its pid."""
    return _acquire(Path(root), {**_holder_here(str(run_dir)), "claim": "launch"})


def hand_over(root: str | Path, mine: dict, pid: int | None = None, job_id: str = "", scheduler: str = "") -> bool:
    """Pass a launch's claim to what it submitted: a process of this host (``pid``) or a scheduler's job, so the
    claim stays live after ``mtk launch`` exits and until the run's rank 0 takes it over. False if it is no longer
    the claim this launch wrote (rank 0 took it over already)."""
    path = Path(root) / LEASE
    try:
        judged = path.read_bytes()
        if json.loads(judged) != mine:
            return False
    except (OSError, ValueError):
        return False
    handed = dict(mine)
    if pid is not None:
        handed["pid"] = pid
    if job_id:
        handed.update(job_id=job_id, scheduler=scheduler)
    return _replace_if(path, judged, handed)


def release(root: str | Path, me: dict) -> None:
    """Give the lease back if it is still ours."""
    path = Path(root) / LEASE
    with _locked(path, wait_s=2.0) as held:
        holder, _ = _read(path)
        if held and holder and holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
