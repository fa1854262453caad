"""Straggler statistics: which ranks and nodes are slower than the rest, at almost no cost.

Every rank times its iterations and its ``forward`` section (batch fetch + model forward, summed over the
micro-batches: local compute without the data-parallel gradient reduction, so a slow rank shows there while its
peers only *wait* longer in the backward's collectives, which is why the step time alone cannot name it).
Every ``resilience.stragglers.interval`` iterations each rank writes its window means into its own slots of a
2 × world vector appended to the all-reduce the loop already does every iteration: no extra collective. Rank 0
then compares each rank with the median, writes a ``{"kind": "stragglers"}`` record to ``metrics.jsonl`` and,
when the slowest rank is beyond ``threshold`` × the median, names it on the next iteration line.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from . import heartbeat_files

TOP = 3  # slowest ranks / nodes kept in a record


class StragglerStats:
    """Accumulates this rank's times; :meth:`payload` and :meth:`receive` bracket the loop's all-reduce."""

    def __init__(self, spec, run_dir: str | Path, rank: int, world: int):
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.rank, self.world = rank, world
        self.enabled = bool(spec.enabled) and world > 1
        self._forward = 0.0
        self._step = 0.0
        self._iters = 0
        self.last: dict[str, Any] | None = None
        self._hosts: dict[int, str] = {}

    def wrap(self, fn: Callable) -> Callable:
        """``fn`` (the forward step function) timed into the ``forward`` section."""
        if not self.enabled:
            return fn

        @wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._forward += time.perf_counter() - t0

        return timed

    def payload(self, iteration: int, step_s: float) -> list[float]:
        """Values to append to this iteration's all-reduce: empty except every ``interval`` iterations."""
        if not self.enabled:
            return []
        self._step += step_s
        self._iters += 1
        if iteration % self.spec.interval:
            return []
        vec = [0.0] * (2 * self.world)
        vec[self.rank] = self._step / self._iters
        vec[self.world + self.rank] = self._forward / self._iters
        self._forward = self._step = 0.0
        self._iters = 0
        return vec

    def receive(self, iteration: int, reduced: list[float]) -> dict[str, Any] | None:
        """Turn the summed vector into a record (every rank can; rank 0 writes it, with the hosts)."""
        if not self.enabled or len(reduced) != 2 * self.world:
            return None
        # Only rank 0 writes the record, so only rank 0 names the hosts (every rank reading them was quadratic in
        # the ranks); ranks keep their hosts for the attempt, so it reads until all are known.
        if self.rank == 0 and len(self._hosts) < self.world:
            self._hosts = hosts_by_rank(self.run_dir)
        self.last = summarize(iteration, reduced[: self.world], reduced[self.world:], self.spec.threshold,
                              self._hosts)
        return self.last


def hosts_by_rank(run_dir: str | Path) -> dict[int, str]:
    """Rank → host from the hang monitors' per-node summaries (one file per node, read on rank 0 only)."""
    out = {}
    for rec in heartbeat_files.read_summaries(run_dir, since=0):
        try:
            out[int(rec["rank"])] = str(rec["host"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


def summarize(iteration: int, step_s: list[float], forward_s: list[float], threshold: float,
              hosts: dict[int, str]) -> dict[str, Any]:
    """The ``stragglers`` record: medians, the slowest ranks and nodes by forward time relative to the median."""
    med_fwd = statistics.median(forward_s)
    med_step = statistics.median(step_s)

    def ratio(x: float) -> float:
        return round(x / med_fwd, 3) if med_fwd > 0 else 1.0

    ranks = sorted(range(len(forward_s)), key=lambda r: forward_s[r], reverse=True)
    slowest: list[dict[str, Any]] = [{"rank": r, "host": hosts.get(r, "?"), "forward_ms": round(forward_s[r] * 1e3, 2),
                "step_ms": round(step_s[r] * 1e3, 2), "ratio": ratio(forward_s[r])} for r in ranks[:TOP]]
    by_host: dict[str, float] = {}
    for r, t in enumerate(forward_s):
        host = hosts.get(r, "?")
        by_host[host] = max(by_host.get(host, 0.0), t)
    node_rows: list[dict[str, Any]] = [{"host": h, "ratio": ratio(t)} for h, t in by_host.items()]
    nodes = sorted(node_rows, key=lambda n: -n["ratio"])[:TOP]
    flagged = [s for s in slowest if s["ratio"] >= threshold]
    return {"kind": "stragglers", "iteration": iteration, "median_forward_ms": round(med_fwd * 1e3, 2),
            "median_step_ms": round(med_step * 1e3, 2), "threshold": threshold, "slowest_ranks": slowest,
            "slowest_nodes": nodes, "stragglers": [s["rank"] for s in flagged], "time": time.time()}


def describe(rec: dict[str, Any]) -> str | None:
    """The iteration-line note for a record with stragglers, e.g. ``rank 1 (node2) 2.31x median forward``."""
    names = [s for s in rec.get("slowest_ranks", []) if s["rank"] in rec.get("stragglers", [])]
    if not names:
        return None
    return ", ".join(f"rank {s['rank']} ({s['host']}) {s['ratio']:.2f}x median forward" for s in names)
