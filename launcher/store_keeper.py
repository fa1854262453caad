"""Keep the rendezvous store up until every node's torchrun has left it.

Why: the torchrun agent that hosts the c10d (or static) TCP store returns as soon as *it* passes the exit barrier
and takes the store down with it, while another node's agent may still be between its check-in and its wait, or
closing its rendezvous. That node then logs ``Failed to recv … Did the remote server shutdown or crash?`` with a
traceback and "failed to shutdown the rendezvous" — after a run that succeeded. Here the process that will host the
store starts the server first (torch's store is multi-tenant: the agent in this process joins it instead of
starting its own), each node counts itself out when its torchrun returns, and the host waits for that count —
bounded, since a node that died never counts out.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta

from mtk.rendezvous import STAGGERED_C10D

LEFT_KEY = "mtk/agents-left"
ALL_LEFT_KEY = "mtk/agents-all-left"
LEAVE_WAIT_S = 15.0  # a node that passed the exit barrier leaves in well under a second; one that died never does
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class StorePlace:
    """Where torchrun's agents meet, and whether this process hosts the store."""

    host: str
    port: int
    nodes: int  # the most nodes that can take part (N, or MAX of MIN:MAX)
    hosts_here: bool


def store_place(torchrun_args: list[str]) -> StorePlace | None:
    """The store torchrun will use for these arguments; None for a rendezvous without a TCP store (etcd)."""
    from torch.distributed.elastic.rendezvous.utils import (
        _matches_machine_hostname,
        _parse_rendezvous_config,
        parse_rendezvous_endpoint,
    )
    from torch.distributed.run import parse_args

    args = parse_args(torchrun_args)
    if args.standalone:
        return None
    nodes = int(str(args.nnodes).split(":")[-1])
    conf = _parse_rendezvous_config(args.rdzv_conf or "")
    if args.rdzv_backend in ("c10d", STAGGERED_C10D):
        host, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=29400)
        asked = conf.get("is_host")
        hosts_here = _matches_machine_hostname(host) if asked is None else asked.lower() in ("1", "true", "yes", "y")
        return StorePlace(host, port, nodes, hosts_here)
    if args.rdzv_backend == "static":
        if not args.rdzv_endpoint and args.master_port is None:
            return None
        endpoint = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}"
        host, port = parse_rendezvous_endpoint(endpoint, default_port=29500)
        return StorePlace(host, port, nodes, int(args.node_rank) == 0)
    return None


class StoreKeeper:
    """Hosts the store (when this process would) for torchrun's agent, and holds it until all nodes left."""

    def __init__(self, place: StorePlace) -> None:
        self.place = place
        self._server = self._start_server() if place.hosts_here else None

    def _start_server(self):
        from torch.distributed import TCPStore

        try:
            return TCPStore(self.place.host, self.place.port, is_master=True, multi_tenant=True,
                            wait_for_workers=False, timeout=timedelta(seconds=60))
        except (RuntimeError, ValueError, TimeoutError):
            return None  # taken: another process on this machine hosts it (torch's agent falls back the same way)

    def leave(self) -> None:
        """Count this node out; on the host, then wait (bounded) for the other nodes to have counted out too."""
        store = self._server if self._server is not None else self._connect()
        if store is None:
            return  # the host is gone already: nothing left to keep up
        with contextlib.suppress(Exception):  # the store going away here ends nothing that matters
            if store.add(LEFT_KEY, 1) >= self.place.nodes:
                store.set(ALL_LEFT_KEY, "1")
                return
            if self._server is not None:
                store.set_timeout(timedelta(seconds=LEAVE_WAIT_S))
                store.wait([ALL_LEFT_KEY])

    def _connect(self):
        from torch.distributed import TCPStore

        try:
            return TCPStore(self.place.host, self.place.port, is_master=False,
                            timeout=timedelta(seconds=CONNECT_TIMEOUT_S))
        except (RuntimeError, ValueError, TimeoutError):
            return None
