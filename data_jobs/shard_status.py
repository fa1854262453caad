"""What ``mtk status`` says about a sharded preprocess: shards done of total and the slowest task so far.

Read from the run's job spec and the files the tasks write (the parts directory while they run, the
``.mtk-preprocess.json`` record once merged), so it works the same on every backend and costs no scheduler call.
"""

from __future__ import annotations

import json
import os


def _prefix(job_json: str) -> tuple[str, int] | None:
    try:
        with open(job_json) as fh:
            data = json.load(fh)["data"]
    except (OSError, ValueError, KeyError):
        return None
    corpus = data.get("corpus")
    if not corpus:
        return None
    prefix = corpus["output_prefix"]
    if not (prefix.startswith("/") or "://" in prefix):
        prefix = f"{data['dir'].rstrip('/')}/{prefix}"
    return prefix, int(corpus.get("shards") or 1)


def shard_summary(job_json: str) -> str:
    """e.g. 'shards 37/64 done, tasks 2/4 done, slowest task 3 (812 s)'; '' when not a sharded preprocess."""
    found = _prefix(job_json)
    if found is None or found[1] <= 1:
        return ""
    prefix, tasks = found
    try:
        with open(f"{prefix}.mtk-preprocess.json") as fh:
            summary = json.load(fh)["summary"]
        return _line("merged", summary.get("task_seconds", {}), tasks, tasks)
    except (OSError, ValueError, KeyError):
        pass
    parts = f"{prefix}.mtk-parts"
    try:
        with open(os.path.join(parts, "manifest.json")) as fh:
            total = len(json.load(fh)["plan"]["shards"])
        names = os.listdir(parts)
    except (OSError, ValueError, KeyError):
        return f"shards ?/? ({tasks} tasks; none has started)"
    from .preprocess import task_seconds

    done = sum(1 for n in names if n.startswith("shard-") and n.endswith(".done"))
    seconds = task_seconds(parts)
    return _line(f"shards {done}/{total} done", seconds, len(seconds), tasks)


def _line(head: str, seconds: dict[str, float], finished: int, tasks: int) -> str:
    line = f"{head}, tasks {finished}/{tasks} done"
    if seconds:
        slowest = max(seconds, key=lambda k: seconds[k])
        line += f", slowest task {slowest} ({seconds[slowest]:.0f} s)"
    return line
