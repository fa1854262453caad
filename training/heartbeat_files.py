"""Where the hang watchdog's files live, so that its shared-filesystem traffic grows linearly with the nodes.

* Every rank's heartbeat: ``<node-local dir>/rank<R>.json`` (``/dev/shm``, else the temp dir): read only by its
  own node's monitor, never crossing the shared filesystem.
* One summary per node: ``<run dir>/state/heartbeats/<host>.json`` (its ranks' records), written by the node's
  monitor every interval; only the judging node (the node whose ranks have GROUP_RANK 0) reads them all.
* One verdict: ``<run dir>/state/hang.json``, written once per attempt; the other monitors read that one file and
  copy it next to their ranks' heartbeats, where the ranks look for it.

At 1,024 nodes x 8 ranks the old layout (every rank's file on the shared filesystem, every monitor reading all
of them every interval) was 8.4 million reads per interval; this one is about 3 metadata operations per node per
interval plus the judge's 2 per node (benchmarks/scale_fs.py measures both).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from mtk import run_layout
from mtk.files import NOFOLLOW, temp_beside

from .refusal import Refused

LOCAL_VERDICT = "hang.json"
LOCAL_PREFIX = "mtk-heartbeats-"
_CHUNK = 1 << 16
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class LocalFolderTaken(Refused):
    """The node-local heartbeat folder's name is taken by another user or by something not a folder."""


def heartbeat_dir(run_dir: str | Path) -> Path:
    """The shared folder of the per-node summaries."""
    return Path(run_dir) / run_layout.HEARTBEATS_DIR


def node_summary_path(run_dir: str | Path, host: str) -> Path:
    return heartbeat_dir(run_dir) / f"{host}.json"


def stacks_path(run_dir: str | Path, host: str, rank: int) -> Path:
    return Path(run_dir) / run_layout.DEBUG_DIR / f"stacks-{host}-rank{rank}.txt"


def _local_base() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def local_dir(run_dir: str | Path, host: str) -> Path:
    """This node's heartbeat folder for ``run_dir`` on node-local storage. The host is in the name because some
    clusters run several "nodes" of one job on one machine (their own hostnames, one /dev/shm); the user's uid is,
    because two users may run one shared run dir on one host (each gets a folder of their own)."""
    key = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return _local_base() / f"{_own_prefix()}{key}-{host}"


def _own_prefix() -> str:
    return f"{LOCAL_PREFIX}{os.getuid()}-"


def ensure_local(folder: Path) -> None:
    """Create the node-local folder private to this user (one atomic mkdir, 0700). /dev/shm is writable by
    everyone: a folder, file or link another user put at the name first could feed the monitor false heartbeats or
    redirect its writes, so it is refused in one line."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    if not owned_here(folder):
        try:
            st = folder.lstat()
        except OSError as exc:
            raise LocalFolderTaken(f"node-local heartbeat folder {folder} cannot be made: {exc.strerror}") from None
        what = ("a symlink" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                else "a file")
        raise LocalFolderTaken(
            f"node-local heartbeat folder {folder} is {what} of uid {st.st_uid}, not a folder of this user (uid "
            f"{os.getuid()}): another user made it first; have it removed (it holds only heartbeats), or set "
            "resilience.watchdog.enabled: false")


def hold_local(folder: Path) -> int:
    """Create the node-local folder (:func:`ensure_local`) and hold it while this process lives: a shared lock on
    it, which the kernel drops however the process ends (SIGKILL included), is how the next start on this host tells
    a live run's folder from a killed run's leftovers (:func:`remove_leftovers`). Returns the descriptor to close."""
    for _ in range(100):
        ensure_local(folder)
        try:
            fd = os.open(folder, _DIR_FLAGS)
        except FileNotFoundError:  # removed as a leftover between the two calls: make it again
            continue
        fcntl.flock(fd, fcntl.LOCK_SH)
        held = os.fstat(fd)
        try:
            now = os.lstat(folder)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # removed as a leftover before the lock was taken: make it again
    raise LocalFolderTaken(f"node-local heartbeat folder {folder} kept disappearing while it was made")


_swept = False


def remove_leftovers(base: Path | None = None) -> list[Path]:
    """This user's heartbeat folders on this host that no live process holds (:func:`hold_local`): what runs
    killed here (SIGKILL after Slurm's kill wait, the OOM killer) left in RAM. Whose lock is held stays."""
    removed: list[Path] = []
    prefix = _own_prefix()
    try:
        with os.scandir(base or _local_base()) as it:
            names = [e.path for e in it if e.name.startswith(prefix)]
    except OSError:
        return removed
    for path in names:
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError:  # gone, or not a folder
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a live run's
                continue
            # /dev/shm and the temp dir are sticky: only this user can rename or remove its entries there
            shutil.rmtree(path, ignore_errors=True)
            removed.append(Path(path))
        finally:
            os.close(fd)
    return removed


def remove_leftovers_once() -> list[Path]:
    """:func:`remove_leftovers`, once per process (a process may start many heartbeats: the benchmarks')."""
    global _swept
    if _swept:
        return []
    _swept = True
    return remove_leftovers()


def owned_here(folder: Path) -> bool:
    """Whether ``folder`` is a real folder (no symlink) owned by this user."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def write_small(path: Path, text: str) -> None:
    """Atomic (temp then rename) in three system calls: open, write, rename. No mkdir, no chmod (``os.open``'s
    mode honours the umask already). The temp name is new each time and created ``O_EXCL|O_NOFOLLOW``
    (:func:`mtk.files.temp_beside`): the shared heartbeats folder may be writable by others, and a file or link
    planted at a fixed temp name would be written through. The folder must exist."""
    fd, tmp = temp_beside(path)
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data):]
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path`` (open and, for a small file, one read); None when it is missing, half-written
    or not an object."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:
            chunks.append(os.read(fd, _CHUNK))
        data = json.loads(b"".join(chunks))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def read_local_beats(folder: Path, since: float) -> list[dict]:
    """The node's rank records published at or after ``since`` (older ones are a previous attempt's)."""
    out: list[dict] = []
    if not owned_here(folder):
        return out
    with contextlib.suppress(OSError):
        for path in sorted(folder.glob("rank*.json")):
            rec = read_json(path)
            if rec is not None and rec.get("alive", 0) >= since:
                out.append(rec)
    return out


def read_summaries(run_dir: str | Path, since: float) -> list[dict]:
    """Every node's rank records from the shared summaries, those published at or after ``since``."""
    out: list[dict] = []
    with contextlib.suppress(OSError), os.scandir(heartbeat_dir(run_dir)) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            summary = read_json(Path(entry.path))
            ranks = summary.get("ranks") if summary else None
            if isinstance(ranks, list):
                out.extend(r for r in ranks if isinstance(r, dict) and r.get("alive", 0) >= since)
    return sorted(out, key=lambda r: r.get("rank", 0))


def remove_local(folder: Path) -> None:
    """The node-local folder at the end of an attempt (it is in RAM on /dev/shm), if it is ours."""
    if owned_here(folder):
        shutil.rmtree(folder, ignore_errors=True)
