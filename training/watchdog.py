"""Hang detection: every rank publishes its progress; each node's ``mtk-entrypoint train`` watches them all.

Why two halves: a hung rank cannot report its own hang (a SIGSTOPped or deadlocked process runs no code), and
its peers sit inside a collective until the NCCL/gloo timeout (30 min by default). So

* :class:`Heartbeat` (in every rank) records progress in memory on every iteration and checkpoint phase (a few
  attribute writes, no I/O, no collective) and a daemon thread publishes it every ``interval`` seconds to
  ``<run dir>/state/heartbeats/rank<R>.json``: phase, iteration, the deadline by which the next progress is
  due (derived from measured step/save times) and ``alive`` (the thread's own clock; it keeps ticking while
  the main thread waits in a collective, which releases the GIL, and stops when the process is stopped,
  dead or stuck holding the GIL).
* :class:`HangMonitor` (in the node's entrypoint, torch-free) reads every rank's file. When a deadline has
  passed it blames the ranks whose ``alive`` went stale (else those furthest behind), writes
  ``state/hang.json``, asks its local ranks for their Python stacks (SIGUSR1 → :mod:`faulthandler`, SIGCONT
  to a stopped rank so the dump can run) and, on CUDA, their NCCL flight recorder, then kills the local
  torchrun and its ranks. The entrypoint exits ``exitcodes.HANG``.

The first monitor to decide writes the verdict; the others adopt it (once a hang is declared, a woken rank could
look alive, and ranks stop publishing), so every node exits with HANG for the same blamed ranks and every rank's
stacks land in ``<run dir>/debug/stacks-<host>-rank<R>.txt``.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mtk import run_layout
from mtk.files import atomic_write

DUMP_SIGNAL = signal.SIGUSR1
# How long the monitor waits for stacks and flight-recorder dumps before killing the ranks.
DUMP_GRACE_S = 3.0
# A rank whose publisher thread has not written for this many intervals is not running at all.
STALE_INTERVALS = 3.0
# Slurm's default KillWait: SIGKILL this long after the SIGTERM of scancel/preemption.
SLURM_KILLWAIT_S = 30
# Phases in the order one iteration goes through them (a rank in a later phase is further along).
PHASES = ("startup", "step", "eval", "save", "done")


def heartbeat_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / run_layout.HEARTBEATS_DIR


def stacks_path(run_dir: str | Path, host: str, rank: int) -> Path:
    return Path(run_dir) / run_layout.DEBUG_DIR / f"stacks-{host}-rank{rank}.txt"


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
    """This rank's progress; :meth:`beat` is the only call on the hot path (no I/O)."""

    def __init__(self, run_dir: str | Path, rank: int, spec):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.host = socket.gethostname()
        # On EKS the pod's hostname is not the node's: the downward API gives MTK_NODE_NAME (what to avoid).
        self.node = os.environ.get("MTK_NODE_NAME") or self.host
        self.spec = spec
        self.enabled = bool(spec.enabled)
        self.timeouts = Timeouts(spec)
        self.path = heartbeat_dir(run_dir) / f"rank{rank}.json"
        self.phase = "startup"
        self.iteration = 0
        self._phase_start = time.monotonic()
        self._progress_wall = time.time()
        self._deadline: float | None = self._progress_wall + self.timeouts.timeout("startup")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stacks: IO[str] | None = None
        self._flight_dumped = False

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
        """Open the stack file, register the dump signal, publish once and start the publisher thread."""
        if not self.enabled:
            return
        path = stacks_path(self.run_dir, self.host, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stacks = open(path, "a")  # noqa: SIM115 - faulthandler writes into it from a signal handler
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
        self.publish()
        faulthandler.unregister(DUMP_SIGNAL)
        # A dump request that arrives while this rank winds down (its peer was killed) must not kill it by the
        # signal's default action: it then exits with its own code.
        with contextlib.suppress(ValueError):  # only the main thread may set handlers
            signal.signal(DUMP_SIGNAL, signal.SIG_IGN)
        if self._stacks is not None:
            self._stacks.close()
        self._thread = None

    def record(self) -> dict:
        return {"rank": self.rank, "host": self.host, "node": self.node, "pid": os.getpid(), "phase": self.phase,
                "iteration": self.iteration, "progress": self._progress_wall, "deadline": self._deadline,
                "alive": time.time(), "interval": self.spec.interval,
                "timeout": None if self._deadline is None else self._deadline - self._progress_wall}

    def publish(self) -> None:
        atomic_write(self.path, json.dumps(self.record()) + "\n")

    def _publisher(self) -> None:
        """Publish until a hang is declared for this attempt; then dump the flight recorder and go quiet.

        Going quiet matters: the monitor wakes a stopped rank (SIGCONT) to dump its stacks, and a heartbeat it
        published then would look alive to a monitor on another node, which would blame the wrong ranks.
        """
        started = time.time()
        while not self._stop.wait(self.spec.interval):
            if read_verdict(self.run_dir, since=started) is not None:
                if not self._flight_dumped:
                    self._flight_dumped = True
                    dump_flight_recorder(self.run_dir, self.host, self.rank)
                continue
            with contextlib.suppress(OSError):
                self.publish()


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


# ===================================================================== the monitor (node side, no torch)
@dataclass
class HangVerdict:
    """Which ranks stopped reporting, and why (what ``state/hang.json`` holds)."""

    blamed: list[dict] = field(default_factory=list)
    overdue: list[int] = field(default_factory=list)
    reason: str = ""

    @property
    def hosts(self) -> list[str]:
        """The blamed nodes (on EKS the node a pod ran on, elsewhere its host)."""
        return sorted({b.get("node") or b["host"] for b in self.blamed})

    def to_json(self) -> dict:
        return {"time": time.time(), "detected_by": socket.gethostname(), "reason": self.reason,
                "blamed_ranks": [b["rank"] for b in self.blamed], "blamed_hosts": self.hosts,
                "blamed": self.blamed, "overdue_ranks": self.overdue}


def read_verdict(run_dir: str | Path, since: float) -> HangVerdict | None:
    """The verdict in ``state/hang.json`` if one was declared at or after ``since`` (this attempt), else None."""
    try:
        data = json.loads((Path(run_dir) / run_layout.HANG_FILE).read_text())
        if float(data["time"]) < since:
            return None
        return HangVerdict(blamed=list(data["blamed"]), overdue=list(data["overdue_ranks"]), reason=str(data["reason"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_heartbeats(run_dir: str | Path, since: float) -> list[dict]:
    """Every rank's last record that was published at or after ``since`` (older files are a previous attempt)."""
    out = []
    for path in sorted(heartbeat_dir(run_dir).glob("rank*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("alive", 0) >= since:
            out.append(rec)
    return out


def judge(records: list[dict], now: float) -> HangVerdict | None:
    """None while every rank is within its deadline; otherwise who is to blame.

    A rank whose publisher thread went quiet (``alive`` older than STALE_INTERVALS intervals) is not running:
    it is the cause, its peers are waiting for it. If every rank is still alive (all stuck in one collective or
    a slow filesystem), blame the ranks furthest behind; if all are level, blame them all.
    """
    overdue = [r for r in records if r.get("deadline") is not None and now > r["deadline"]]
    if not overdue:
        return None
    stale = [r for r in records if r.get("phase") != "done"
             and now - r["alive"] > STALE_INTERVALS * float(r.get("interval", 5.0))]
    if stale:
        blamed, why = stale, "stopped publishing heartbeats (process stopped, dead or stuck holding the GIL)"
    else:
        def progress(r: dict) -> tuple[int, int]:
            return r["iteration"], PHASES.index(r["phase"]) if r["phase"] in PHASES else 0

        low = min(progress(r) for r in records if r.get("phase") != "done")
        blamed = [r for r in records if r.get("phase") != "done" and progress(r) == low]
        why = "alive but made no progress (furthest behind)"
    entries = [{"rank": r["rank"], "host": r["host"], "node": r.get("node", r["host"]), "pid": r["pid"],
                "phase": r["phase"],
                "iteration": r["iteration"], "silent_s": round(now - r["alive"], 1),
                "no_progress_s": round(now - r["progress"], 1), "timeout_s": r.get("timeout")}
               for r in sorted(blamed, key=lambda r: r["rank"])]
    first = min(overdue, key=lambda r: r["deadline"])
    hosts = ", ".join(sorted({e["host"] for e in entries}))
    reason = (f"rank(s) {', '.join(str(e['rank']) for e in entries)} on {hosts} "
              f"{why}; rank {first['rank']} passed its {first['phase']} deadline "
              f"({first.get('timeout') or 0:.0f}s) at iteration {first['iteration']}")
    return HangVerdict(blamed=entries, overdue=sorted(r["rank"] for r in overdue), reason=reason)


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP), as opposed to running, sleeping or gone."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


class HangMonitor:
    """Runs in ``mtk-entrypoint train`` beside torchrun; :meth:`watch` returns a HangVerdict once a hang is found."""

    def __init__(self, run_dir: str | Path, spec, log=print):
        self.run_dir = Path(run_dir)
        self.spec = spec
        self.log = log
        self.started = time.time()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def watch(self) -> HangVerdict | None:
        """Poll until a hang is found (the HangVerdict) or :meth:`stop` is called (None)."""
        while not self._stop.wait(self.spec.interval):
            # A verdict another node already declared wins: after it, the blamed rank is woken to dump its stacks
            # and could look alive, so judging again could blame different ranks.
            verdict = read_verdict(self.run_dir, self.started)
            if verdict is None:
                verdict = judge(read_heartbeats(self.run_dir, self.started), time.time())
            if verdict is not None:
                return verdict
        return None

    def record(self, verdict: HangVerdict) -> Path:
        """``state/hang.json`` (written once per attempt: the first node to decide; others adopt its verdict)."""
        path = self.run_dir / run_layout.HANG_FILE
        if read_verdict(self.run_dir, self.started) is None:
            atomic_write(path, json.dumps(verdict.to_json(), indent=2) + "\n")
            atomic_write(self.run_dir / run_layout.HANG_HOSTS_FILE, "".join(f"{h}\n" for h in verdict.hosts))
        return path


    def dump_and_kill(self, agent_pid: int, worker_pids: list[int]) -> None:
        """Ask local ranks for stacks, hold the run frozen while every node dumps, then SIGKILL agent and ranks.

        A stopped rank must run to dump: it gets SIGCONT and is stopped again as soon as its stack file has grown,
        so that it cannot go on training with its peers. Keeping it stopped (not killed) keeps its peers blocked in
        their collective until the monitors on the other nodes, which see the verdict within one interval, have
        taken their stacks too: a killed rank would end that collective and its peers would exit without a dump.
        """
        stacks = {int(r["pid"]): stacks_path(self.run_dir, r["host"], int(r["rank"]))
                  for r in read_heartbeats(self.run_dir, 0) if r.get("host") == socket.gethostname()}
        for pid in worker_pids:
            with contextlib.suppress(ProcessLookupError):
                stopped = _stopped(pid)
                path = stacks.get(pid)
                before = path.stat().st_size if path is not None and path.exists() else 0
                os.kill(pid, DUMP_SIGNAL)
                if stopped:
                    os.kill(pid, signal.SIGCONT)
                    deadline = time.monotonic() + DUMP_GRACE_S
                    while (time.monotonic() < deadline and path is not None
                           and (path.stat().st_size if path.exists() else 0) == before):
                        time.sleep(0.001)
                    time.sleep(0.02)  # the rest of the dump (one write per frame)
                    os.kill(pid, signal.SIGSTOP)
        time.sleep(max(DUMP_GRACE_S, float(self.spec.interval) + 1.0))
        # The agent first: killed workers would otherwise be restarted by an elastic agent.
        for pid in [agent_pid, *worker_pids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
