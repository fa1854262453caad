"""Reading the logs a Slurm run writes: ``<run dir>/logs/<step>-<job id>.out``, one per job, where srun's
``--label`` prefixes each node's lines with its task number (task N runs on node N of the allocation).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from mtk import run_layout
from mtk.backends import LogsError

_LABEL = re.compile(r"^\s*(\d+): ")
# srun's report of a failed task, e.g. "srun: error: node2: task 1: Exited with exit code 3"
_TASK_FAILED = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")


def log_path(run_dir: str, step: str, job_id: str) -> Path:
    return Path(run_dir) / run_layout.LOGS_DIR / f"{step}-{job_id}.out"


def array_logs(run_dir: str, step: str, job_id: str) -> dict[int, Path]:
    """task index -> log of each task of a job array (``<step>-<array id>_<task>.out``); {} for a plain job."""
    found = {}
    for path in (Path(run_dir) / run_layout.LOGS_DIR).glob(f"{step}-{job_id}_*.out"):
        index = path.name[len(f"{step}-{job_id}_"):-len(".out")]
        if index.isdigit():
            found[int(index)] = path
    return found


def pick_tasks(tasks: dict[int, Path], node: str | None) -> list[Path]:
    """The array tasks ``--node`` names: all, the task with that index, or those that ran on that host."""
    if node is None:
        return [tasks[i] for i in sorted(tasks)]
    if node.isdigit():
        if int(node) not in tasks:
            raise LogsError(f"--node {node}: this job array has tasks {', '.join(map(str, sorted(tasks)))}")
        return [tasks[int(node)]]
    picked = []
    for i in sorted(tasks):
        with open(tasks[i], errors="replace") as fh:
            if f" on {node} (" in fh.readline():
                picked.append(tasks[i])
    if not picked:
        raise LogsError(f"--node {node!r}: no task of this job array ran on it (give a task index 0-{max(tasks)})")
    return picked


def node_hosts(run_dir: str, job_id: str) -> list[str]:
    """The allocation's hosts in task order, as the batch script recorded them."""
    path = Path(run_dir) / run_layout.STATE_DIR / f"nodes.{job_id}"
    try:
        return path.read_text().split()
    except OSError:
        return []


def node_index(node: str | None, hosts: list[str]) -> int | None:
    """``--node`` as a task number (``1``) or a host name (``node2``)."""
    if node is None:
        return None
    if node.isdigit() and (not hosts or int(node) < len(hosts)):
        return int(node)
    if node in hosts:
        return hosts.index(node)
    if not hosts:
        raise LogsError(f"--node {node!r}: this job's node list is not recorded yet (it has not started); give a "
                        "task number (0 = the first node) or try again once it runs")
    known = ", ".join(f"{i} ({h})" for i, h in enumerate(hosts))
    raise LogsError(f"--node {node!r}: not one of this job's nodes; give a task number or host: {known}")


def keep(line: str, index: int | None) -> bool:
    """With a node filter, only that node's labelled lines (plus srun's own errors that name it)."""
    if index is None:
        return True
    match = _LABEL.match(line)
    return match is not None and int(match.group(1)) == index


def failing_tail(text: str, lines: int = 12) -> list[str]:
    """The last lines of the node that failed first (from srun's report), else of the whole log."""
    all_lines = text.splitlines()
    for line in all_lines:
        match = _TASK_FAILED.search(line)
        if match:
            task = int(re.split(r"[,-]", match.group(2))[0])
            own = [ln for ln in all_lines if keep(ln, task)]
            return [*own[-lines:], line.strip()]
    return all_lines[-lines:]


def read_lines(path: Path, index: int | None = None) -> Iterator[str]:
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                if keep(line, index):
                    yield line
    except FileNotFoundError:
        return


class Tail:
    """Incremental reader of a growing file: complete lines only (a partial last line waits for its newline,
    so a UTF-8 character split across two writes is never garbled)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""

    def read(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
                self.offset = fh.tell()
        except FileNotFoundError:
            return []
        lines = (self.partial + chunk).splitlines(keepends=True)
        self.partial = b""
        if lines and not lines[-1].endswith(b"\n") and not final:
            self.partial = lines.pop()
        return [line.decode(errors="replace") for line in lines]
