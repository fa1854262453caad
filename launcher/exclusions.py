"""The run's excluded nodes: ``<run dir>/state/excluded_nodes``, one ``host<TAB>UTC time<TAB>reason`` per line.

Run state belongs to the run (shared storage), so the list accumulates across restarts and any shell can read it:
the Slurm script appends the nodes the hang watchdog blamed and passes the list as ``--exclude`` to every restart;
``mtk status`` prints it; EKS renders it as node anti-affinity.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import exitcodes
from .backends import atomic_write


@dataclass(frozen=True)
class Excluded:
    host: str
    since: str
    reason: str


def read_excluded(run_dir: str | Path) -> list[Excluded]:
    path = Path(run_dir) / exitcodes.EXCLUDED_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out: dict[str, Excluded] = {}
    for line in lines:
        host, _, rest = line.partition("\t")
        since, _, reason = rest.partition("\t")
        if host.strip() and host not in out:
            out[host] = Excluded(host.strip(), since, reason)
    return list(out.values())


def add_excluded(run_dir: str | Path, host: str, reason: str) -> bool:
    """Append ``host`` unless already excluded (rewrites the file atomically); True when it was added."""
    if any(e.host == host for e in read_excluded(run_dir)):
        return False
    if "\t" in host or "\n" in host or not host:
        raise ValueError(f"not a host name: {host!r}")
    path = Path(run_dir) / exitcodes.EXCLUDED_FILE
    old = path.read_text() if path.exists() else ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write(path, old + f"{host}\t{stamp}\t{' '.join(reason.split())}\n")
    return True
