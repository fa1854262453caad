"""What ``mtk ls`` read from a run's ``metrics.jsonl``, kept until the file changes.

``mtk ls`` over a week of runs parsed every run's whole metrics file each time (restarts are found among all the
train records): 1.5-3 s over 1,000 runs, most of them ended and unchanged. An entry is keyed by the file's path,
size and modification time, so a file that grew or was rewritten is read again; anything unreadable is a miss.
Deleting ``<cache_root>/progress`` is always safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from mtk.files import atomic_write, cache_root

SCHEMA = 1


def _entry(path: Path) -> Path:
    return cache_root() / "progress" / (hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32] + ".json")


def cached(path: Path, read: Callable[[Path], dict]) -> dict:
    """``read(path)``, or what it returned last time for this file at this size and modification time."""
    try:
        stat = path.stat()
    except OSError:
        return read(path)
    key = [SCHEMA, str(path.absolute()), stat.st_size, stat.st_mtime_ns]
    entry = _entry(path)
    try:
        stored = json.loads(entry.read_text())
        if stored.get("key") == key and isinstance(stored.get("value"), dict):
            return stored["value"]
    except (OSError, ValueError, AttributeError):
        pass
    value = read(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(entry, json.dumps({"key": key, "value": value}))
    except (OSError, TypeError, ValueError):
        pass  # a read-only or full cache only costs the next ls its speed
    return value
