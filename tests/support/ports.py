"""Free TCP ports on 127.0.0.1, for the daemons the tests and the benchmarks start (etcd, dockerd's registry, moto,
a c10d store, a gloo group): the one helper both use."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free a moment ago (held together while chosen, so never the same one)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def free_port() -> int:
    """One TCP port that was free a moment ago."""
    return free_ports(1)[0]
