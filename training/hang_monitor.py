"""The node side of hang detection (torch-free): one :class:`HangMonitor` per node, in ``mtk-entrypoint train``.

Every interval each monitor reads its own ranks' heartbeats from node-local storage and writes them as one
summary file per node to the shared run dir; the monitor of the node that hosts rank 0 (the judge) reads every
summary and decides. The judge writes the one verdict (``state/hang.json``); every other monitor reads that one
file and adopts it. So the shared filesystem sees a constant number of operations per node per interval, plus
the judge's one read per node: linear in the nodes in total, where every monitor reading every rank's file was
quadratic (issue 45; ``benchmarks/scale_fs.py`` counts both).

What the user sees is unchanged: a stopped rank is blamed once its deadline has passed and its heartbeat has
been quiet for STALE_INTERVALS intervals (one more interval for the summaries to reach the judge), the verdict
reaches every node within one interval, and every node dumps its ranks' stacks before the run is killed.

When the judge's node is gone, one judge at a time takes over (issue 51), so the shared filesystem stays linear
exactly when it is already stressed: every node had judged alone, each reading all N summaries in the same
interval (N^2 operations). Nodes take turns in a fixed order, the node's place among the ranks (the node holding
ranks 8g..8g+7 is node g; g = 0 is the judge): node g may take over once its own ranks are
``FALLBACK_INTERVALS + TAKEOVER_INTERVALS * g`` intervals past their deadline, and only if no other node holds the
judge's lease (``state/hang-judge.json``: a host and a time, renewed every interval by its holder, stale after
LEASE_INTERVALS). The holder judges every interval until its verdict is declared; everyone else adopts it. With
the judge dead, the verdict comes ``FALLBACK_INTERVALS + TAKEOVER_INTERVALS`` (+1 for the summaries) intervals
after the deadline, ``TAKEOVER_INTERVALS`` more for each node in front that is dead too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mtk import run_layout
from mtk.files import atomic_write

from .heartbeat_files import (
    LOCAL_VERDICT,
    ensure_local,
    heartbeat_dir,
    local_dir,
    node_summary_path,
    read_json,
    read_local_beats,
    read_summaries,
    remove_local,
    stacks_path,
    write_small,
)

DUMP_SIGNAL = signal.SIGUSR1
# How long the monitor waits for stacks and flight-recorder dumps before killing the ranks.
DUMP_GRACE_S = 3.0
# A rank whose publisher thread has not written for this many intervals is not running at all.
STALE_INTERVALS = 3.0
# Phases in the order one iteration goes through them (a rank in a later phase is further along).
PHASES = ("startup", "step", "eval", "save", "done")
# A node whose own ranks are this many intervals past their deadline with no verdict may judge instead: the judge's
# monitor is gone (it declares within two intervals of a deadline otherwise). Node g (in rank order) waits
# TAKEOVER_INTERVALS more per node in front of it, so that one node at a time takes over.
FALLBACK_INTERVALS = 4.0
TAKEOVER_INTERVALS = 2.0
# The lease of the node that took over judging: its holder renews it every interval; older than this, it is free.
JUDGE_LEASE = "state/hang-judge.json"
LEASE_INTERVALS = 2.0


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


def verdict_from(data: dict | None, since: float) -> HangVerdict | None:
    """A verdict record (``hang.json``'s content) if it was declared at or after ``since``, else None."""
    try:
        if data is None or float(data["time"]) < since:
            return None
        return HangVerdict(blamed=list(data["blamed"]), overdue=list(data["overdue_ranks"]), reason=str(data["reason"]))
    except (ValueError, KeyError, TypeError):
        return None


def read_verdict(run_dir: str | Path, since: float) -> HangVerdict | None:
    """The verdict in ``state/hang.json`` if one was declared at or after ``since`` (this attempt), else None."""
    return verdict_from(read_json(Path(run_dir) / run_layout.HANG_FILE), since)


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


def node_order(records: list[dict]) -> int:
    """This node's place in the takeover order, from its own ranks: the node holding ranks R..R+k-1 (k of them) is
    node R // k (0: the judge's node, holding rank 0). Every node computes it alone, without reading anything."""
    ranks = [int(r["rank"]) for r in records if isinstance(r.get("rank"), int)]
    return min(ranks) // len(ranks) if ranks else 0


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP), as opposed to running, sleeping or gone."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


class HangMonitor:
    """Runs in ``mtk-entrypoint train`` beside torchrun; :meth:`watch` returns a HangVerdict once a hang is found.

    ``host`` is this node's name (default: the hostname); benchmarks/scale_fs.py poses as many nodes with it.
    """

    def __init__(self, run_dir: str | Path, spec, log=print, host: str | None = None):
        self.run_dir = Path(run_dir)
        self.spec = spec
        self.log = log
        self.host = host or socket.gethostname()
        self.local = local_dir(self.run_dir, self.host)
        self.summary = node_summary_path(self.run_dir, self.host)
        self.started = time.time()
        self.judging = False  # this node hosts rank 0: it reads every summary and declares the verdict
        self.standing_in = False  # the judge is gone and this node holds the judge's lease
        self._stop = threading.Event()
        self._shared_ready = False

    def stop(self) -> None:
        self._stop.set()
        remove_local(self.local)

    def poll(self) -> HangVerdict | None:
        """One turn: adopt a declared verdict, else publish this node's summary and, on the judge, decide."""
        # A verdict another node already declared wins: after it, the blamed rank is woken to dump its stacks
        # and could look alive, so judging again could blame different ranks.
        verdict = read_verdict(self.run_dir, self.started)
        if verdict is not None:
            return verdict
        records = read_local_beats(self.local, self.started)
        if not records:
            return None
        if not self._shared_ready:
            heartbeat_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
            self._shared_ready = True
        with contextlib.suppress(OSError):  # a full or flaky filesystem must not end the monitor
            write_small(self.summary, json.dumps({"host": self.host, "time": time.time(), "ranks": records}) + "\n")
        self.judging = any(r.get("rank") == 0 for r in records)
        now = time.time()
        if not self.judging and not self._stand_in(records, now):
            return None
        return judge(read_summaries(self.run_dir, self.started), now)

    def _stand_in(self, records: list[dict], now: float) -> bool:
        """Whether this node judges in the judge's place this interval: its ranks are late enough for its turn
        (node_order) and no other node holds the judge's lease; if so it takes or renews the lease. Costs the
        shared filesystem nothing until this node's turn, then one read (and, holding it, one write)."""
        interval = float(self.spec.interval)
        late = max(((now - r["deadline"]) / interval for r in records if r.get("deadline") is not None),
                   default=0.0)
        if late < FALLBACK_INTERVALS + TAKEOVER_INTERVALS * node_order(records):
            return False
        path = self.run_dir / JUDGE_LEASE
        lease = read_json(path)
        try:
            held = (lease is not None and lease.get("host") != self.host and float(lease["time"]) >= self.started
                    and now - float(lease["time"]) <= LEASE_INTERVALS * interval)
        except (KeyError, TypeError, ValueError):
            held = False  # a lease that cannot be read is nobody's
        if held:
            self.standing_in = False
            return False
        with contextlib.suppress(OSError):  # unwritten, it is only taken again next interval
            write_small(path, json.dumps({"host": self.host, "time": now}) + "\n")
        self.standing_in = True
        return True

    def watch(self) -> HangVerdict | None:
        """Poll until a hang is found (the HangVerdict) or :meth:`stop` is called (None)."""
        while not self._stop.wait(self.spec.interval):
            verdict = self.poll()
            if verdict is not None:
                return verdict
        return None

    def record(self, verdict: HangVerdict) -> Path:
        """``state/hang.json`` (written once per attempt, by the judge; others adopt its verdict), copied beside
        this node's heartbeats, where its ranks look for it (they go quiet and dump their flight recorder)."""
        path = self.run_dir / run_layout.HANG_FILE
        data = read_json(path)
        if verdict_from(data, self.started) is None:
            data = verdict.to_json()
            atomic_write(path, json.dumps(data, indent=2) + "\n")
            atomic_write(self.run_dir / run_layout.HANG_HOSTS_FILE, "".join(f"{h}\n" for h in verdict.hosts))
        with contextlib.suppress(OSError):
            ensure_local(self.local)
            write_small(self.local / LOCAL_VERDICT, json.dumps(data) + "\n")
        return path

    def dump_and_kill(self, agent_pid: int, worker_pids: list[int]) -> None:
        """Ask local ranks for stacks, hold the run frozen while every node dumps, then SIGKILL agent and ranks.

        A stopped rank must run to dump: it gets SIGCONT and is stopped again as soon as its stack file has grown,
        so that it cannot go on training with its peers. Keeping it stopped (not killed) keeps its peers blocked in
        their collective until the monitors on the other nodes, which see the verdict within one interval, have
        taken their stacks too: a killed rank would end that collective and its peers would exit without a dump.
        """
        stacks = {int(r["pid"]): stacks_path(self.run_dir, r["host"], int(r["rank"]))
                  for r in read_local_beats(self.local, 0)}
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
