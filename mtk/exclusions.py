"""The run's excluded nodes: ``<run dir>/state/excluded_nodes``, one ``host<TAB>UTC time<TAB>reason`` per line.

Run state belongs to the run (shared storage), so the list accumulates across restarts and any shell can read it:
the Slurm script appends the nodes the hang watchdog blamed and passes the list as ``--exclude`` to every restart;
``mtk status`` prints it; EKS renders it as node anti-affinity.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from mtk import run_layout
from mtk.exitcodes import BadInput
from mtk.files import atomic_write

# What a node name may be (a Slurm host, a Kubernetes node): cluster.exclude_nodes is checked against it, and a
# recorded exclusion that is not one is ignored.
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass(frozen=True)
class Excluded:
    host: str
    since: str
    reason: str


def read_excluded(run_dir: str | Path) -> list[Excluded]:
    path = Path(run_dir) / run_layout.EXCLUDED_FILE
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
    path = Path(run_dir) / run_layout.EXCLUDED_FILE
    old = path.read_text() if path.exists() else ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write(path, old + f"{host}\t{stamp}\t{' '.join(reason.split())}\n")
    return True


# ------------------------------------------------------------------ relaunch: carry the exclusions forward
class BadExclusionRecord(BadInput, ValueError):
    """A recorded excluded node is not a node name: named with the file and line, exit code 2."""


def _same_checkpoints(job_file: Path, ckpt_dir: str) -> bool:
    """True when ``job_file`` (a run's job.json) trains into ``ckpt_dir``: that run is an attempt of this one."""
    import json

    try:
        data = json.loads(job_file.read_text())
        return data["train"]["checkpoint"]["dir"] == ckpt_dir
    except (OSError, ValueError, KeyError, TypeError):
        return False


def recorded_for_relaunch(job, run_dir: str | Path) -> list[tuple[Path, Excluded]]:
    """Nodes that earlier attempts of this run excluded: the target run dir's list and the lists of every run
    under ``cluster.runs_dir`` that resumes from the same checkpoint dir (a relaunch into a new run dir
    continues those checkpoints, so it inherits their bad nodes). Paths not reachable from here give nothing."""
    dirs = [Path(run_dir)]
    runs = Path(job.cluster.runs_dir)
    ckpt = job.train.checkpoint.dir
    if ckpt and runs.is_dir():
        dirs += sorted(p.parent for p in runs.glob(f"*/{run_layout.JOB_FILE}")
                       if p.parent != Path(run_dir) and _same_checkpoints(p, ckpt))
    found: list[tuple[Path, Excluded]] = []
    seen = set()
    for d in dirs:
        path = d / run_layout.EXCLUDED_FILE
        for lineno, e in enumerate(read_excluded(d), 1):
            if not NODE_NAME.match(e.host):
                raise BadExclusionRecord(f"{path}:{lineno}: {e.host!r} is not a node name; fix or delete that "
                                         "line (the file lists host<TAB>time<TAB>reason)")
            if e.host not in seen:
                seen.add(e.host)
                found.append((path, e))
    return found


def with_recorded_exclusions(job, run_dir: str | Path):
    """``job`` with the recorded excluded nodes appended to ``cluster.exclude_nodes`` (the spec's own first), and a
    note saying which were added and from where (None when nothing was added)."""
    recorded = [(p, e) for p, e in recorded_for_relaunch(job, run_dir) if e.host not in job.cluster.exclude_nodes]
    if not recorded:
        return job, None
    job = job.model_copy(deep=True)
    job.cluster.exclude_nodes = [*job.cluster.exclude_nodes, *(e.host for _, e in recorded)]
    lines = [f"  {e.host} (excluded {e.since}: {e.reason}; {p})" for p, e in recorded]
    note = (f"avoiding {len(recorded)} node(s) earlier attempts of this run excluded (cluster.exclude_nodes is "
            f"now {','.join(job.cluster.exclude_nodes)}):\n" + "\n".join(lines))
    return job, note
