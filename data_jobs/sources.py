"""Where corpus files live: a local/shared path or ``s3://bucket/prefix``. Listing, sizes and streamed opening.

S3 objects are read through ranged GETs (boto3), so a byte-range shard of a large JSONL object or a Parquet
row group is fetched on its own and memory does not grow with the object. Credentials and the endpoint come
from boto3's usual chain (``AWS_*`` variables, profiles, instance roles); none of them is written anywhere.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache
from typing import IO, Any

S3 = "s3://"


def is_s3(path: str) -> bool:
    return path.startswith(S3)


def split_s3(url: str) -> tuple[str, str]:
    bucket, _, key = url[len(S3):].partition("/")
    return bucket, key


@lru_cache(maxsize=1)
def _client() -> Any:
    import boto3

    return boto3.client("s3")


class SourceError(ValueError):
    """A corpus location that cannot be listed or read; names it and what to do."""


def list_s3(url: str) -> list[tuple[str, int]]:
    """(url, size) of every object under an ``s3://bucket/prefix`` (an exact key: that object alone)."""
    bucket, prefix = split_s3(url)
    try:
        pages = _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        found = [(f"{S3}{bucket}/{o['Key']}", int(o["Size"])) for page in pages for o in page.get("Contents", [])]
    except Exception as exc:  # botocore's error classes are generated at run time
        raise SourceError(f"{url}: cannot list it ({exc}); check the bucket name and AWS credentials") from None
    exact = [f for f in found if f[0] == url]
    if exact:
        return exact
    base = url.rstrip("/") + "/"
    return sorted(f for f in found if f[0].startswith(base) or not prefix)


_SIZES: dict[str, int] = {}


def remember_size(url: str, size: int) -> None:
    _SIZES[url] = size


def size(path: str) -> int:
    """Bytes of a file or object as stored (compressed size for compressed files)."""
    if not is_s3(path):
        return os.path.getsize(path)
    if path not in _SIZES:
        bucket, key = split_s3(path)
        try:
            _SIZES[path] = int(_client().head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception as exc:
            raise SourceError(f"{path}: cannot read it ({exc}); check the key and AWS credentials") from None
    return _SIZES[path]


def mtime(path: str) -> float:
    """Local modification time (an S3 object's identity is its URL and size in the plan)."""
    return 0.0 if is_s3(path) else os.path.getmtime(path)


class _S3Range(io.RawIOBase):
    """A seekable, read-only view of one S3 object: each read is a ranged GET of what was asked for."""

    def __init__(self, url: str):
        self.url = url
        self.bucket, self.key = split_s3(url)
        self.length = size(url)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), self.length - self.pos)
        if want <= 0:
            return 0
        rng = f"bytes={self.pos}-{self.pos + want - 1}"
        try:
            data = _client().get_object(Bucket=self.bucket, Key=self.key, Range=rng)["Body"].read()
        except Exception as exc:
            raise SourceError(f"{self.url}: read failed at byte {self.pos} ({exc})") from None
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


def open_raw(path: str) -> IO[bytes]:
    """A seekable binary stream of the stored bytes (local file, or ranged reads of an S3 object)."""
    if is_s3(path):
        return io.BufferedReader(_S3Range(path), buffer_size=8 << 20)
    return open(path, "rb")
