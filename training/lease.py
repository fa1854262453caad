"""One writer per checkpoint dir: a lease file that names the run holding it (host, pid, job id, run dir).

Two runs pointed at one checkpoint dir (two launches of one job name at once, or a copied spec) would each
delete the other's ``*.partial`` saves at start and publish over each other's tracker. Rank 0 takes the lease
before touching the dir; a second writer is refused with the first one's name. The lease is given back at
exit; one left by a dead process is taken over when its owner is provably gone (same host, pid not running),
when it belongs to the same run dir (a requeued or successor job of the same run: Slurm runs those one at a
time), or when Slurm no longer knows the holder's job. Anything else is refused with the fix: stop that run,
or delete the lease file if its node is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import time
from pathlib import Path

from .refusal import Refused

LEASE = ".mtk-writer.json"


class LeaseHeld(Refused):
    """Another live run writes to this checkpoint dir."""


def _holder_here(run_dir: str) -> dict:
    from mtk.rendezvous import node_place, scheduler_here

    job = node_place(os.environ).job_id or os.environ.get("HOSTNAME") or ""
    return {"host": socket.gethostname(), "pid": os.getpid(), "job_id": job, "scheduler": scheduler_here(os.environ),
            "run_dir": str(run_dir), "since": time.time()}


def _alive_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _job_ended(holder: dict) -> bool:
    """True when the holder's scheduler says its job is no longer queued or running (False when it cannot tell).
    A lease written before leases named their scheduler asks every scheduler that can tell."""
    from mtk.rendezvous import job_ended

    scheduler = holder.get("scheduler")
    return job_ended(str(holder.get("job_id", "")), scheduler if isinstance(scheduler, str) else None)


def _stale(holder: dict, me: dict) -> bool:
    if holder.get("run_dir") == me["run_dir"]:
        return True  # the same run, restarted: its previous attempt is over
    if holder.get("host") == me["host"]:
        return not _alive_here(int(holder.get("pid", 0)))
    return _job_ended(holder)  # e.g. a run whose node died, resumed on another


def describe(holder: dict) -> str:
    job = f", job {holder['job_id']}" if holder.get("job_id") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(holder.get("since", 0)))
    return f"run {holder.get('run_dir')} (host {holder.get('host')}, pid {holder.get('pid')}{job}, since {since})"


def live_holder(root: str | Path, run_dir: str | Path) -> dict | None:
    """Who holds ``root``'s lease if a new run at ``run_dir`` would be refused by :func:`acquire` (the same
    rules, asked from the launching machine so a second launch is refused before it queues), else None."""
    try:
        holder = json.loads((Path(root) / LEASE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(holder, dict) or not holder:
        return None
    try:
        return None if _stale(holder, _holder_here(str(run_dir))) else holder
    except (TypeError, ValueError):  # a hand-edited lease (pid not a number): the nodes would take it over
        return None


def acquire(root: str | Path, run_dir: str | Path) -> dict:
    """Take the lease on ``root`` for this process, or raise LeaseHeld naming the holder. Rank 0 only."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LEASE
    me = _holder_here(str(run_dir))
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text())
            except (OSError, ValueError):
                holder = {}
            if holder and not _stale(holder, me):
                raise LeaseHeld(f"checkpoint dir {root} is in use by {describe(holder)}; two writers would delete "
                                f"each other's saves. Stop that run first, give this one its own "
                                f"train.checkpoint.dir, or delete {path} if that run's node is gone") from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # stale: taken over below (O_EXCL again, so two restarts cannot both win)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(me) + "\n")
        atexit.register(release, root, me)
        return me
    raise LeaseHeld(f"could not take the lease on {root} ({path} keeps changing): another run is starting there")


def release(root: str | Path, me: dict) -> None:
    """Give the lease back if it is still ours."""
    path = Path(root) / LEASE
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
