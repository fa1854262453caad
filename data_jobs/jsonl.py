"""Corpus input: finding the files, cutting them into shards, and reading JSONL with exact file:line errors.

A plain JSONL file is cut into byte ranges of about ``shard_bytes``; a shard owns every line that *starts*
inside its range, so shards never overlap or miss a line. A compressed file (.gz/.xz/.zst) cannot be seeked
into and is one shard. A Parquet file is cut at row-group boundaries (``start``/``end`` count row groups).
Line numbers are counted only when an error has to name one. Files may be local or ``s3://`` objects.
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

from . import sources

COMPRESSED = (".gz", ".xz", ".zst")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)


class InputError(ValueError):
    """Bad input that stops preprocessing; names the file (and line) and what to do."""


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


@dataclass
class BadLine:
    """A line that is not a usable document."""

    path: str
    line: int
    reason: str
    unit: str = "line"  # "row" for Parquet

    def __str__(self) -> str:
        where = f":{self.line}" if self.unit == "line" else f": row {self.line}"
        return f"{self.path}{where}: {self.reason}"


def is_parquet(path: str) -> bool:
    return path.endswith(PARQUET_SUFFIXES)


def _is_corpus_file(name: str) -> bool:
    return name.removesuffix(_compression(name)).endswith(JSONL_SUFFIXES) or is_parquet(name)


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


def _compression(name: str) -> str:
    return next((s for s in COMPRESSED if name.endswith(s)), "")


def plan_shards(files: list[str], shard_bytes: int) -> list[Shard]:
    """Deterministic shards for ``files``: the same inputs always give the same plan."""
    shards: list[Shard] = []
    for path in files:
        if is_parquet(path):
            from .parquet import row_group_bytes, row_group_ranges

            for a, b in row_group_ranges(path, shard_bytes):
                shards.append(Shard(len(shards), path, a, b, row_group_bytes(path, a, b)))
            continue
        size = sources.size(path)
        if _compression(path) or size <= shard_bytes:
            shards.append(Shard(len(shards), path, 0, -1, size))
            continue
        for start in range(0, size, shard_bytes):
            end = start + shard_bytes
            shards.append(Shard(len(shards), path, start, -1 if end >= size else end, min(end, size) - start))
    return shards


def open_binary(path: str, kind: str | None = None) -> IO[bytes]:
    """Open a possibly compressed file for streamed binary reading (``kind`` overrides the file's suffix)."""
    kind = _compression(path) if kind is None else kind
    raw = sources.open_raw(path)
    if kind == ".gz":
        return _OwnsGzip(raw)  # type: ignore[return-value]
    if kind == ".xz":
        return _OwnsXz(raw)
    if kind == ".zst":
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise InputError(f"{path}: reading .zst needs the 'zstandard' package (pip install zstandard)") from None
        return io.BufferedReader(_ZstdReader(raw, zstandard), buffer_size=1 << 20)
    return raw


class _ZstdReader(io.RawIOBase):
    """Streamed .zst decoding that notices a truncated last frame (zstandard's stream_reader just stops)."""

    def __init__(self, raw: IO[bytes], zstandard: object):
        self.raw, self.zstd = raw, zstandard
        self.dobj = zstandard.ZstdDecompressor().decompressobj()  # type: ignore[attr-defined]
        self.pending = b""
        self.started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf: object) -> int:
        view = memoryview(buf).cast("B")  # type: ignore[arg-type]
        while not self.pending:
            chunk = self.raw.read(1 << 20)
            if not chunk:
                if self.started and not self.dobj.eof:
                    raise EOFError("the last zstd frame ends early")
                return 0
            while chunk:
                if self.dobj.eof:  # a new frame follows the finished one
                    self.dobj = self.zstd.ZstdDecompressor().decompressobj()  # type: ignore[attr-defined]
                self.started = True
                self.pending += self.dobj.decompress(chunk)
                chunk = self.dobj.unused_data if self.dobj.eof else b""
        n = min(len(view), len(self.pending))
        view[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


class _ClosesRaw:
    """Mixin for decompressing readers that also close the stream they read from."""

    _raw: IO[bytes]

    def close(self) -> None:
        try:
            super().close()  # type: ignore[misc]
        finally:
            self._raw.close()


class _OwnsGzip(_ClosesRaw, gzip.GzipFile):
    """A gzip reader that also closes the stream it reads from."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw


class _OwnsXz(_ClosesRaw, lzma.LZMAFile):
    """An xz reader that also closes the stream it reads from."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(raw, "rb")
        self._raw = raw


def decode_errors() -> tuple[type[BaseException], ...]:
    """What a truncated, corrupt or mislabelled compressed file raises while being read."""
    errs: list[type[BaseException]] = [EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib_error()]
    try:
        import zstandard

        errs.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errs)


def zlib_error() -> type[BaseException]:
    import zlib

    return zlib.error


def damaged(path: str, exc: BaseException) -> InputError:
    """The named error for a compressed file that cannot be decoded to its end."""
    kind = _compression(path) or "plain"
    what = "ends early (truncated)" if isinstance(exc, EOFError) else f"cannot be decoded as {kind} ({exc})"
    return InputError(f"{path}: this {kind} file {what}; re-download it (getdata with sha256 catches this), "
                      "or rename it if its suffix does not match its real format")


def line_number(path: str, offset: int) -> int:
    """1-based number of the line starting at byte ``offset`` (counted only when an error needs it)."""
    count = 0
    with sources.open_raw(path) as fh:
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
    try:
        yield from _read_lines(shard, max_line)
    except decode_errors() as exc:
        raise damaged(shard.path, exc) from None


def _read_lines(shard: Shard, max_line: int) -> Iterator[tuple[int, int, bytes | None]]:
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
