"""The locks a preprocess takes on its output prefix, as files beside it (flock: released when a process dies).

``PREFIX.mtk-lock``: one merge (or one unsharded run) at a time; tried, never waited for, except by
:func:`merge_settled`. ``PREFIX.mtk-lock.task-N``: held by task N while it works in the parts dir, waited for
(its predecessor still running, or the merge removing the parts); the merge removes the parts only while holding
every task's, so nothing is deleted under a task that is still inside them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from typing import IO, Any

from mtk.files import open_nofollow

from .preprocess_worker import PreprocessError

Log = Callable[[str], Any]


def _lock_file(path: str, writable: bool = True) -> IO[str]:
    """A lock file, created if missing (when ``writable``), never through a symlink planted in the shared data dir
    (:func:`mtk.files.open_nofollow`: a lock opened through a link could create the file it names)."""
    if writable:
        return os.fdopen(open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666), "a+")
    return os.fdopen(open_nofollow(path, os.O_RDONLY), "r")


@contextlib.contextmanager
def exclusive(path: str) -> Iterator[None]:
    """One preprocess per output prefix (a requeued Slurm job racing its predecessor would corrupt parts)."""
    import errno
    import fcntl

    with _lock_file(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise PreprocessError(f"another preprocess is writing {path.removesuffix('.mtk-lock')} "
                                      "(lock held); wait for it or stop it") from None
            # a file system without flock (some NFS mounts): carry on unlocked
        yield


def task_lock(prefix: str, index: int, log: Log) -> contextlib.AbstractContextManager[None]:
    """Task ``index``'s lock, waited for when another process holds it: a predecessor of this task still
    running (a requeue), or the merging task removing the parts. Either finishes; then this one goes on."""
    return _waited(f"{prefix}.mtk-lock.task-{index}", log, f"task {index}'s lock is held (its predecessor still "
                   "running, or the merge removing the parts)")


def merge_settled(prefix: str, log: Log) -> contextlib.AbstractContextManager[None]:
    """The merge lock, waited for: once held, no merge of ``prefix`` is running, and whatever the merging
    process did after it (``after_merge``: the index cache, the run's data-ready marker) is done."""
    return _waited(f"{prefix}.mtk-lock", log, "the merge is still running (or building the index cache)")


def register_run(parts_dir: str, run_dir: str) -> None:
    """Under a task lock: this task's run waits for these parts' merge (another run on the same output prefix
    may be the one that merges: it then tells this run too, :func:`remove_parts`)."""
    import hashlib

    from .preprocess_worker import atomic_json

    name = hashlib.sha256(os.path.abspath(run_dir).encode()).hexdigest()[:16]
    atomic_json(os.path.join(parts_dir, f"run-{name}.json"), {"run_dir": os.path.abspath(run_dir)})


def remove_parts(prefix: str, tasks: int, parts_dir: str, log: Log) -> list[str]:
    """Delete the parts once the merged record is written, holding every task's lock while doing so; returns
    the run dirs its tasks registered (:func:`register_run`), read under the same locks.

    A task that started before the record existed may still be reading or writing in the parts dir (a late
    array task finding its shards done; a requeued one): it holds its task lock for all of that, so waiting
    for the locks means nothing is deleted under it, and a task that takes its lock after this finds the
    record and does nothing.
    """
    import json

    runs: list[str] = []
    with contextlib.ExitStack() as held:
        for i in range(tasks):
            held.enter_context(task_lock(prefix, i, log))
        for name in sorted(os.listdir(parts_dir)) if os.path.isdir(parts_dir) else []:
            if name.startswith("run-") and name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError), \
                        open(os.path.join(parts_dir, name)) as fh:
                    runs.append(str(json.load(fh)["run_dir"]))
        shutil.rmtree(parts_dir, ignore_errors=True)
        for i in range(tasks):
            forget_task_lock(prefix, i)
    return runs


def forget_task_lock(prefix: str, index: int) -> None:
    """Remove task ``index``'s lock file: the merge, for every task; a task that found the run merged, for the
    one it recreated after that."""
    with contextlib.suppress(OSError):
        os.unlink(f"{prefix}.mtk-lock.task-{index}")


@contextlib.contextmanager
def _waited(path: str, log: Log, held_by: str) -> Iterator[None]:
    import fcntl

    try:
        fh = _lock_file(path)
    except OSError:  # a dataset this user may only read: its lock file (flock needs no write access), or none
        try:
            fh = _lock_file(path, writable=False)
        except OSError:
            log(f"preprocess: cannot open {path}; going on without it")
            yield
            return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"preprocess: {held_by}; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some NFS mounts): carry on unlocked
            pass
        yield
