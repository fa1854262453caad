"""Fault injection for crash-safety tests, loaded by every Python process whose PYTHONPATH starts here.

The shipped package reads no test switch: a test that wants a fault puts this folder first on the processes'
PYTHONPATH (see :mod:`support.faults`) and names the fault in ``MTK_FAULT``:

    save:N              SIGKILL rank 0 after the shards of iteration N are written and before they are published
    hold:N[,M...]:DIR   every training rank, before iteration N+1 (iterations 1..N done: their metrics and any
                        interval checkpoint written), writes DIR/held.N.rank<RANK> and waits until the test
                        writes DIR/release.N (meanwhile DIR/signalled.N.rank<RANK> once the run's own handler has
                        caught SIGTERM/SIGUSR2); a process that finds release.N already there (a restart after
                        the test acted) goes on at once
    hold-shard:T:N:DIR  a preprocess process in Slurm array task T (``*``: any process) that has finished N shards
                        writes DIR/held.<pid> and waits until DIR/release exists (tests kill it there)

A hold is the event a test acts on: the run waits at that point however fast the machine is, and goes on only
when the test has done what it had to do mid-run (a signal, a kill, a trigger file).
"""

from __future__ import annotations

import os
import signal
import time

_FAULT = os.environ.get("MTK_FAULT", "")


def _wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)


def _mark(path: str) -> None:
    """Create the marker ``path`` at once (temp + rename: a reader never sees it half written)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


if _FAULT.startswith("save:"):
    _at = int(_FAULT.split(":", 1)[1])
    from mtk.training import checkpoint as _checkpoint

    _publish = _checkpoint.publish

    def _publish_or_die(root, iteration):
        if iteration == _at:
            print(f"[fault] MTK_FAULT={_FAULT}: killing rank 0 before publishing iteration {iteration}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return _publish(root, iteration)

    _checkpoint.publish = _publish_or_die

if _FAULT.startswith("hold:") and os.environ.get("RANK") is not None:
    _points, _dir = _FAULT.split(":", 2)[1:]
    _hold_at = {int(n) for n in _points.split(",")}
    from mtk.training import loop as _loop

    _train_step = _loop.Trainer.train_step

    def _held_train_step(self):
        done, rank = self.iteration, os.environ["RANK"]
        release = os.path.join(_dir, f"release.{done}")
        if done in _hold_at and not os.path.exists(release):
            _mark(os.path.join(_dir, f"held.{done}.rank{rank}"))
            signalled = os.path.join(_dir, f"signalled.{done}.rank{rank}")
            while not os.path.exists(release):
                if self.control.signalled and not os.path.exists(signalled):
                    _mark(signalled)  # the run's handler has the signal: it acts on it at the next iteration
                time.sleep(0.05)
        return _train_step(self)

    _loop.Trainer.train_step = _held_train_step

if _FAULT.startswith("hold-shard:"):
    _task, _count, _dir = _FAULT.split(":", 3)[1:]
    if _task in ("*", os.environ.get("SLURM_ARRAY_TASK_ID")):
        from mtk.data_jobs import preprocess as _preprocess
        from mtk.data_jobs import preprocess_worker as _preprocess_worker

        _process_shard = _preprocess_worker.process_shard
        _finished = [0]  # shards this process has finished (a pool worker counts its own)

        def _held_process_shard(*args, **kwargs):
            result = _process_shard(*args, **kwargs)
            _finished[0] += 1
            release = os.path.join(_dir, "release")
            if _finished[0] == int(_count) and not os.path.exists(release):
                _mark(os.path.join(_dir, f"held.{os.getpid()}"))
                _wait_for(release)
            return result

        # the coordinator calls it inline (one worker), pool processes through the worker module
        _preprocess.process_shard = _preprocess_worker.process_shard = _held_process_shard
