"""Hang detection: every rank publishes its progress; each node's ``mtk-entrypoint train`` watches its own.

Why two halves: a hung rank cannot report its own hang (a SIGSTOPped or deadlocked process runs no code), and
its peers sit inside a collective until the NCCL/gloo timeout (30 min by default). So

* :class:`Heartbeat` (in every rank) records progress in memory on every iteration and checkpoint phase (a few
  attribute writes, no I/O, no collective) and a daemon thread publishes it every ``interval`` seconds to
  ``rank<R>.json`` in a node-local folder (:func:`heartbeat_files.local_dir`, on ``/dev/shm``): phase,
  iteration, the deadline by which the next progress is due (derived from measured step/save times) and
  ``alive`` (the thread's own clock; it keeps ticking while the main thread waits in a collective, which
  releases the GIL, and stops when the process is stopped, dead or stuck holding the GIL).
* :class:`~mtk.training.hang_monitor.HangMonitor` (in the node's entrypoint, torch-free) reads its node's
  files, writes one summary per node to ``<run dir>/state/heartbeats/<host>.json``, and the node hosting rank 0
  judges them all. When a deadline has passed it blames the ranks whose ``alive`` went stale (else those
  furthest behind), writes ``state/hang.json``, asks its local ranks for their Python stacks (SIGUSR1 →
  :mod:`faulthandler`, SIGCONT to a stopped rank so the dump can run) and, on CUDA, their NCCL flight recorder,
  then kills the local torchrun and its ranks. The entrypoint exits ``exitcodes.HANG``.

The other nodes adopt the judge's verdict (once a hang is declared, a woken rank could look alive, and ranks stop
publishing), so every node exits with HANG for the same blamed ranks and every rank's stacks land in
``<run dir>/debug/stacks-<host>-rank<R>.txt``. Only the summaries and the verdict cross the shared filesystem:
its traffic is linear in the nodes (issue 45).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import IO

from mtk import run_layout
from mtk.files import atomic_write, open_append

from .hang_monitor import (  # noqa: F401 - the monitor's names, where callers have always imported them
    DUMP_GRACE_S,
    DUMP_SIGNAL,
    PHASES,
    STALE_INTERVALS,
    HangMonitor,
    HangVerdict,
    judge,
    read_verdict,
    verdict_from,
)
from .heartbeat_files import (  # noqa: F401 - heartbeat_dir, ensure_local: where callers have always imported them
    LOCAL_VERDICT,
    ensure_local,
    heartbeat_dir,
    hold_local,
    local_dir,
    read_json,
    remove_leftovers_once,
    stacks_path,
    write_small,
)

# Slurm's default KillWait: SIGKILL this long after the SIGTERM of scancel/preemption.
SLURM_KILLWAIT_S = 30


class Timeouts:
    """Per-phase timeouts: ``factor`` × the slowest measured duration, at least ``min_timeout``; spec overrides win."""

    def __init__(self, spec):
        self.spec = spec
        self.slowest: dict[str, float] = {}

    def observe(self, phase: str, seconds: float) -> None:
        if seconds > self.slowest.get(phase, 0.0):
            self.slowest[phase] = seconds

    def timeout(self, phase: str) -> float:
        s = self.spec
        override = {"step": s.step_timeout, "eval": s.step_timeout, "save": s.save_timeout}.get(phase)
        if override is not None:
            return float(override)
        if phase == "startup" or phase not in self.slowest:
            return float(s.startup_timeout)
        return max(float(s.min_timeout), s.factor * self.slowest[phase])


class Heartbeat:
    """This rank's progress; :meth:`beat` is the only call on the hot path (no I/O).

    ``host`` is this node's name (default: the hostname); benchmarks/scale_fs.py poses as many nodes with it.
    """

    def __init__(self, run_dir: str | Path, rank: int, spec, host: str | None = None):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.host = host or socket.gethostname()
        # On EKS the pod's hostname is not the node's: the downward API gives MTK_NODE_NAME (what to avoid).
        self.node = os.environ.get("MTK_NODE_NAME") or self.host
        self.spec = spec
        self.enabled = bool(spec.enabled)
        self.timeouts = Timeouts(spec)
        self.local = local_dir(run_dir, self.host)
        self.path = self.local / f"rank{rank}.json"
        self.phase = "startup"
        self.iteration = 0
        self._phase_start = time.monotonic()
        self._progress_wall = time.time()
        self._deadline: float | None = self._progress_wall + self.timeouts.timeout("startup")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stacks: IO[str] | None = None
        self._held: int | None = None  # the node-local folder's descriptor, locked while this rank lives
        self._flight_dumped = False
        self._started = time.time()

    # ----------------------------------------------------------- hot path
    def beat(self, phase: str, iteration: int) -> None:
        """Progress: ``phase`` begins at ``iteration``. The finished phase's duration feeds its timeout."""
        if not self.enabled:
            return
        now = time.monotonic()
        if self.phase in ("step", "eval", "save"):
            self.timeouts.observe(self.phase, now - self._phase_start)
            if self.phase == "save" and self.rank == 0 and now - self._phase_start > SLURM_KILLWAIT_S:
                print(f"[watchdog] a checkpoint save took {now - self._phase_start:.0f}s, longer than Slurm's default "
                      f"KillWait ({SLURM_KILLWAIT_S}s): a SIGTERM save on preemption/scancel would be killed. Stop "
                      "with `mtk stop` or `scancel --signal=USR2 --batch JOB` (then scancel), and keep "
                      "cluster.slurm.signal_lead above this for the time limit", flush=True)
        self.phase, self.iteration, self._phase_start = phase, iteration, now
        self._progress_wall = time.time()
        self._deadline = (self._progress_wall + self.timeouts.timeout(phase)) if phase != "done" else None

    # ----------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Remove what killed runs left on this host's node-local storage, make and hold this run's folder (a
        :class:`~mtk.training.heartbeat_files.LocalFolderTaken` when another user took its name), open the stack
        file, register the dump signal, publish once and start the publisher thread."""
        if not self.enabled:
            return
        remove_leftovers_once()
        self._held = hold_local(self.local)
        path = stacks_path(self.run_dir, self.host, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stacks = open_append(path)  # faulthandler writes into it from a signal handler
        faulthandler.register(DUMP_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        self.publish()
        self._thread = threading.Thread(target=self._publisher, name="mtk-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self.beat("done", self.iteration)
        self._stop.set()
        self._thread.join(timeout=2 * self.spec.interval)
        with contextlib.suppress(OSError):  # the node's monitor may have ended (and removed the folder) first
            self.publish()
        faulthandler.unregister(DUMP_SIGNAL)
        # A dump request that arrives while this rank winds down (its peer was killed) must not kill it by the
        # signal's default action: it then exits with its own code.
        with contextlib.suppress(ValueError):  # only the main thread may set handlers
            signal.signal(DUMP_SIGNAL, signal.SIG_IGN)
        if self._stacks is not None:
            self._stacks.close()
        if self._held is not None:
            os.close(self._held)
            self._held = None
        self._thread = None

    def record(self) -> dict:
        return {"rank": self.rank, "host": self.host, "node": self.node, "pid": os.getpid(), "phase": self.phase,
                "iteration": self.iteration, "progress": self._progress_wall, "deadline": self._deadline,
                "alive": time.time(), "interval": self.spec.interval,
                "timeout": None if self._deadline is None else self._deadline - self._progress_wall}

    def publish(self) -> None:
        write_small(self.path, json.dumps(self.record()) + "\n")

    def declared(self) -> HangVerdict | None:
        """The verdict this node's monitor copied beside the heartbeats during this attempt, if any."""
        return verdict_from(read_json(self.local / LOCAL_VERDICT), self._started)

    def tick(self) -> None:
        """One publisher turn: publish, unless a hang is declared (then dump the flight recorder once, go quiet).

        Going quiet matters: the monitor wakes a stopped rank (SIGCONT) to dump its stacks, and a heartbeat it
        published then would look alive to the judge, which would blame the wrong ranks.
        """
        if self.declared() is not None:
            if not self._flight_dumped:
                self._flight_dumped = True
                dump_flight_recorder(self.run_dir, self.host, self.rank)
            return
        with contextlib.suppress(OSError):
            self.publish()

    def _publisher(self) -> None:
        self._started = time.time()
        while not self._stop.wait(self.spec.interval):
            self.tick()


def dump_flight_recorder(run_dir: Path, host: str, rank: int) -> Path | None:
    """Write torch's NCCL flight-recorder buffer (CUDA builds with TORCH_NCCL_TRACE_BUFFER_SIZE > 0) to debug/."""
    try:
        import torch
        import torch.distributed as dist

        if not (torch.cuda.is_available() and dist.is_initialized()):
            return None
        dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace", None)
        if dump is None:
            return None
        path = Path(run_dir) / run_layout.DEBUG_DIR / f"nccl-trace-{host}-rank{rank}.pkl"
        atomic_write(path, dump())
        return path
    except Exception as exc:  # a diagnostic must never take the rank down
        print(f"[watchdog] rank {rank}: NCCL flight recorder not dumped: {exc}", flush=True)
        return None


