"""JSONL input: finding the files, cutting them into shards, and reading documents with exact file:line errors.

A plain file is cut into byte ranges of about ``shard_bytes``; a shard owns every line that *starts* inside
its range, so shards never overlap or miss a line. A compressed file (.gz/.xz/.zst) cannot be seeked into
and is one shard. Line numbers are counted only when an error has to name one.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO

COMPRESSED = (".gz", ".xz", ".zst")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


class InputError(ValueError):
    """Bad input that stops preprocessing; names the file (and line) and what to do."""


@dataclass(frozen=True)
class Shard:
    """Lines of ``path`` that start in ``[start, end)`` (``end`` -1: to the end of the file)."""

    index: int
    path: str
    start: int
    end: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BadLine:
    """A line that is not a usable document."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def input_files(path: str) -> list[str]:
    """The file itself, or every JSONL shard of a directory (sorted, compressed ones included)."""
    if os.path.isdir(path):
        names = sorted(
            os.path.join(root, f) for root, _, files in os.walk(path) for f in files
            if f.removesuffix(_compression(f)).endswith(JSONL_SUFFIXES))
        if not names:
            raise InputError(f"{path}: no .jsonl/.json files (optionally .gz/.xz/.zst) in this directory")
        return names
    if not os.path.isfile(path):
        raise InputError(f"{path}: input not found; run the getdata step or fix data.corpus.input")
    return [path]


def _compression(name: str) -> str:
    return next((s for s in COMPRESSED if name.endswith(s)), "")


def plan_shards(files: list[str], shard_bytes: int) -> list[Shard]:
    """Deterministic shards for ``files``: the same inputs always give the same plan."""
    shards: list[Shard] = []
    for path in files:
        size = os.path.getsize(path)
        if _compression(path) or size <= shard_bytes:
            shards.append(Shard(len(shards), path, 0, -1))
            continue
        for start in range(0, size, shard_bytes):
            end = start + shard_bytes
            shards.append(Shard(len(shards), path, start, -1 if end >= size else end))
    return shards


def open_binary(path: str, kind: str | None = None) -> IO[bytes]:
    """Open a possibly compressed file for streamed binary reading (``kind`` overrides the file's suffix)."""
    kind = _compression(path) if kind is None else kind
    if kind == ".gz":
        return gzip.open(path, "rb")
    if kind == ".xz":
        return lzma.open(path, "rb")
    if kind == ".zst":
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{path}: reading .zst needs the 'zstandard' package (pip install zstandard)") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def line_number(path: str, offset: int) -> int:
    """1-based number of the line starting at byte ``offset`` (counted only when an error needs it)."""
    count = 0
    with open(path, "rb") as fh:
        left = offset
        while left > 0:
            block = fh.read(min(left, 8 << 20))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count + 1


def read_lines(shard: Shard, max_line: int) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield (line number within the shard, byte offset of the line, raw line) for the shard's lines.

    raw is None for a line longer than ``max_line`` bytes (skipped without being held in memory). The offset
    is in the file as stored (only meaningful for uncompressed files, the only ones cut into several shards).
    """
    with open_binary(shard.path) as fh:
        pos = shard.start
        if shard.start:
            fh.seek(shard.start - 1)
            pos = shard.start - 1 + len(fh.readline())  # finish the line the previous shard owns
        n = 0
        while shard.end < 0 or pos < shard.end:
            start = pos
            raw = fh.readline(max_line + 1)
            if not raw:
                return
            n += 1
            pos += len(raw)
            if len(raw) > max_line and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(8 << 20)
                    pos += len(raw)
                yield n, start, None
                continue
            yield n, start, raw


def parse_document(raw: bytes, keys: list[str]) -> list[str] | str:
    """The texts for ``keys`` from one JSONL line, or the reason the line is unusable."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte {exc.start} of the line)"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"malformed JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    texts = []
    for key in keys:
        if key not in obj:
            return f"missing key '{key}' (present: {', '.join(list(obj)[:8]) or 'none'})"
        text = obj[key]
        if not isinstance(text, str):
            return f"key '{key}' is a {type(text).__name__}, expected a string"
        texts.append(text)
    if b"\\ud" in raw or b"\\uD" in raw:
        for key, text in zip(keys, texts, strict=True):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"key '{key}' has a lone surrogate {text[exc.start]!r} (invalid Unicode; fix the producer)"
    return texts
