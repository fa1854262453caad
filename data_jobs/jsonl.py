"""Reading JSONL shards with exact file:line errors (compressed or not, local or ``s3://``).

A shard (``corpus.Shard``) owns every line that *starts* inside its byte range, so shards never overlap or miss a
line. Line numbers are counted only when an error has to name one.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from . import sources
from .corpus import InputError, Shard, compression


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


def open_binary(path: str, kind: str | None = None) -> IO[bytes]:
    """Open a possibly compressed file for streamed binary reading (``kind`` overrides the file's suffix)."""
    kind = compression(path) if kind is None else kind
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
    kind = compression(path) or "plain"
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
