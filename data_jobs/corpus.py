"""Corpus input, whatever its format: finding the files and cutting them into shards.

A plain JSONL file is cut into byte ranges of about ``shard_bytes``; a shard owns every line that *starts*
inside its range, so shards never overlap or miss a line. A compressed file (.gz/.xz/.zst) cannot be seeked
into and is one shard. A Parquet file is cut at row-group boundaries (``start``/``end`` count row groups).
Files may be local or ``s3://`` objects. The readers (``jsonl``, ``parquet``) import this module, never each
other; the plan itself is ``sharding.plan_shards``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from mtk.exitcodes import BadInput

from . import sources

COMPRESSED = (".gz", ".xz", ".zst")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)


class InputError(BadInput, ValueError):
    """Bad input that stops preprocessing; names the file (and line) and what to do (exit 2)."""


@dataclass(frozen=True)
class Shard:
    """Lines of ``path`` that start in byte ``[start, end)`` (``end`` -1: to the end of the file); for Parquet,
    row groups ``[start, end)``."""

    index: int
    path: str
    start: int
    end: int
    nbytes: int = 0  # stored bytes it covers (Parquet: its row groups' data); for progress and task balance

    def to_dict(self) -> dict:
        return asdict(self)


def is_parquet(path: str) -> bool:
    return path.endswith(PARQUET_SUFFIXES)


def _is_corpus_file(name: str) -> bool:
    return name.removesuffix(compression(name)).endswith(JSONL_SUFFIXES) or is_parquet(name)


def input_files(path: str) -> list[str]:
    """The file itself, or every JSONL/Parquet file under a directory or S3 prefix (sorted by name)."""
    if sources.is_s3(path):
        try:
            found = sources.list_s3(path)
        except sources.SourceError as exc:
            raise InputError(str(exc)) from None
        names = [u for u, n in found if _is_corpus_file(u)]
        for url, size in found:
            sources.remember_size(url, size)
        if not names:
            raise InputError(f"{path}: no .jsonl/.json (optionally .gz/.xz/.zst) or .parquet objects under it")
        return names
    if os.path.isdir(path):
        names = sorted(
            os.path.join(root, f) for root, _, files in os.walk(path) for f in files if _is_corpus_file(f))
        if not names:
            raise InputError(f"{path}: no .jsonl/.json (optionally .gz/.xz/.zst) or .parquet files in this directory")
        return names
    if not os.path.isfile(path):
        raise InputError(f"{path}: input not found; run the getdata step or fix data.corpus.input")
    return [path]


def compression(name: str) -> str:
    """The compression suffix of ``name`` ("" for none)."""
    return next((s for s in COMPRESSED if name.endswith(s)), "")
