"""torch's c10d rendezvous with each node's joins one stagger step per node index apart (``mtk-c10d``).

Why: torch's c10d rendezvous keeps the whole rendezvous (every participant and its heartbeat) in one store key that
each join compare-and-sets. When a thousand agents join within torch's own 0.3 s jitter, ~700 contend for every
write, a waiting agent's turn comes every ~20 s, and the joined agents' heartbeats expire (15 s) before they are
renewed: the rendezvous never completes (benchmarks/scale_rendezvous.py, docs/scale.md). Joins 25 ms apart (one
link of that chain takes ~2.5 ms at 1,024) never contend. A node here waits ``index x stagger`` before every round
it joins — the first, a restarted pod's, every re-rendezvous after a failure (whose leaving it spreads; torch still
lets the waiting agents into the new round at once when the last has left: docs/scale.md) — then runs torch's own
c10d handler unchanged. The index is the node's own (a PyTorchJob pod's replica index): nothing shared is read.

torch's registry is the documented way to add a backend: :func:`register` adds ``mtk-c10d``, whose rendezvous conf
carries ``mtk_join_stagger`` (seconds) and ``mtk_join_index``; everything else in it goes to torch's c10d handler.
"""

from __future__ import annotations

import sys
import time

from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    rendezvous_handler_registry,
)

from mtk.rendezvous import JOIN_INDEX_KEY, JOIN_STAGGER_KEY, STAGGERED_C10D

_sleep = time.sleep  # the one wait this module makes


class StaggeredRendezvousHandler(RendezvousHandler):
    """torch's c10d handler; each round joined ``delay_s`` after this node is ready to join it."""

    def __init__(self, inner: RendezvousHandler, delay_s: float, index: int) -> None:
        self.inner, self.delay_s, self.index = inner, delay_s, index

    def next_rendezvous(self) -> RendezvousInfo:
        if self.delay_s > 0:
            print(f"mtk: node index {self.index} joins the rendezvous round in {self.delay_s:.3g} s (joins come one "
                  "stagger step per index apart: a thousand at once never complete)", file=sys.stderr, flush=True)
            _sleep(self.delay_s)
        return self.inner.next_rendezvous()

    def get_backend(self) -> str:
        return STAGGERED_C10D

    @property
    def use_agent_store(self) -> bool:
        return self.inner.use_agent_store

    def is_closed(self) -> bool:
        return self.inner.is_closed()

    def set_closed(self) -> None:
        self.inner.set_closed()

    def num_nodes_waiting(self) -> int:
        return self.inner.num_nodes_waiting()

    def get_run_id(self) -> str:
        return self.inner.get_run_id()

    def shutdown(self) -> bool:
        return self.inner.shutdown()


def join_delay_s(params: RendezvousParameters) -> tuple[float, int]:
    """(seconds to wait before each round, this node's index) from ``params``' conf."""
    stagger = float(params.get(JOIN_STAGGER_KEY, 0.0))
    index = int(params.get(JOIN_INDEX_KEY, 0))
    if stagger < 0 or index < 0:
        raise ValueError(f"{JOIN_STAGGER_KEY}={stagger} and {JOIN_INDEX_KEY}={index} must be ≥ 0")
    return index * stagger, index


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torch's own c10d handler for ``params`` (without mtk's keys), wrapped to wait before each round."""
    delay, index = join_delay_s(params)
    config = {k: v for k, v in params.config.items() if k not in (JOIN_STAGGER_KEY, JOIN_INDEX_KEY)}
    inner = rendezvous_handler_registry.create_handler(RendezvousParameters(
        backend="c10d", endpoint=params.endpoint, run_id=params.run_id, min_nodes=params.min_nodes,
        max_nodes=params.max_nodes, local_addr=params.local_addr, **config))
    return StaggeredRendezvousHandler(inner, delay, index)


def register() -> None:
    """Make ``mtk-c10d`` a torchrun rendezvous backend in this process (idempotent)."""
    rendezvous_handler_registry.register(STAGGERED_C10D, create_handler)
