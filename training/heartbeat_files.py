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
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from mtk import run_layout

LOCAL_VERDICT = "hang.json"
_CHUNK = 1 << 16


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
    clusters run several "nodes" of one job on one machine (their own hostnames, one /dev/shm)."""
    key = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return _local_base() / f"mtk-heartbeats-{key}-{host}"


def ensure_local(folder: Path) -> None:
    """Create the node-local folder private to this user. /dev/shm is writable by everyone and the name is
    predictable: a folder another user made there could feed the monitor false heartbeats, so it is refused."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not owned_here(folder):
        raise PermissionError(f"heartbeat folder {folder} exists and belongs to another user (uid "
                              f"{folder.lstat().st_uid}); remove it or run as its owner")


def owned_here(folder: Path) -> bool:
    """Whether ``folder`` is a real folder (no symlink) owned by this user."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def write_small(path: Path, text: str) -> None:
    """Atomic (temp then rename) in three system calls: open, write, rename. No mkdir, no chmod (``os.open``'s
    mode honours the umask already), a temp name fixed per process. The folder must exist."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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
