"""Where data lives and how its bytes are read: local/shared paths, ``s3://`` objects and, for getdata, http(s).

Corpus files: listing, sizes and streamed opening. Downloads (``chunks_from``): one transport per scheme yields an
object's bytes from an offset, so getdata resumes a dropped transfer where it stopped.

S3 objects are read through ranged GETs (boto3), so a byte-range shard of a large JSONL object or a Parquet
row group is fetched on its own and memory does not grow with the object. Credentials and the endpoint come
from boto3's usual chain (``AWS_*`` variables such as ``AWS_ENDPOINT_URL_S3``, profiles, instance roles); none of
them is written anywhere. One S3 client serves listing, ranged reads and downloads.
"""

from __future__ import annotations

import io
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import IO, Any

from mtk.exitcodes import BadInput, UserFacingError
from mtk.files import ByteWindow

S3 = "s3://"


def is_s3(path: str) -> bool:
    return path.startswith(S3)


def split_s3(url: str) -> tuple[str, str]:
    bucket, _, key = url[len(S3):].partition("/")
    return bucket, key


def _client() -> Any:
    """The S3 client (boto3 loads only for S3 users), one per endpoint the environment names."""
    return _client_for(os.environ.get("AWS_ENDPOINT_URL_S3") or None)


@lru_cache(maxsize=4)
def _client_for(endpoint: str | None) -> Any:
    from mtk.extras import requires

    with requires("data", "reading s3:// data"):
        import boto3

    return boto3.client("s3", endpoint_url=endpoint)


class SourceError(BadInput, ValueError):
    """A corpus location that cannot be listed or read; names it and what to do (exit 2)."""


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


class _S3Range(ByteWindow):
    """A seekable, read-only view of one S3 object: each read is a ranged GET of what was asked for."""

    def __init__(self, url: str):
        super().__init__(size(url))
        self.url = url
        self.bucket, self.key = split_s3(url)

    def read_at(self, pos: int, n: int) -> bytes:
        try:
            return _client().get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={pos}-{pos + n - 1}")[
                "Body"].read()
        except Exception as exc:
            raise SourceError(f"{self.url}: read failed at byte {pos} ({exc})") from None


def open_raw(path: str) -> IO[bytes]:
    """A seekable binary stream of the stored bytes (local file, or ranged reads of an S3 object)."""
    if is_s3(path):
        return io.BufferedReader(_S3Range(path), buffer_size=8 << 20)
    return open(path, "rb")


# ---------------------------------------------------------------- downloads: yield chunks from an offset
CHUNK = 1 << 20
TIMEOUT = 60.0


class FetchError(UserFacingError, RuntimeError):
    """A file that could not be fetched or verified; the message names the URL and what to do (exit 1)."""



def _host(url: str) -> tuple[str, str, int | None]:
    u = urllib.parse.urlparse(url)
    return u.scheme, (u.hostname or "").lower(), u.port


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Carry the bearer token across a redirect only to the same scheme, host and port."""

    def __init__(self, origin: str, header: str):
        self.origin, self.header = _host(origin), header

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.remove_header("Authorization")
            if _host(new.full_url) == self.origin:
                new.add_unredirected_header("Authorization", self.header)
        return new


def http_chunks(url: str, offset: int, on_total: Callable[[int | None], None],
                 token: str | None = None, auth_name: str | None = None) -> Iterator[bytes]:
    headers = {"User-Agent": "mtk-getdata", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    req = urllib.request.Request(url, headers=headers)
    handlers = []
    if token:
        bearer = f"Bearer {token}"
        # Unredirected: urllib itself never forwards it; _SameHostAuth re-adds it for same-host hops only.
        req.add_unredirected_header("Authorization", bearer)
        handlers.append(_SameHostAuth(url, bearer))
    try:
        resp = urllib.request.build_opener(*handlers).open(req, timeout=TIMEOUT)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to fetch
            on_total(offset)
            return
        hint = ""
        if exc.code in (401, 403):
            hint = (f"; the token in {auth_name} (data.fetch[].auth) was refused — check that it grants access"
                    if token else "; the server wants credentials: add auth: HF_TOKEN (or another name listed in "
                    "cluster.secrets) to this data.fetch item")
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}{hint}") from None
    with resp:
        length = resp.headers.get("Content-Length")
        if offset and resp.status == 206:
            start = int((resp.headers.get("Content-Range") or "bytes 0-").split()[1].split("-")[0])
            if start != offset:
                raise Restart
            on_total(offset + int(length) if length else None)
        elif offset:
            raise Restart  # server ignored Range: start over
        else:
            on_total(int(length) if length else None)
        while chunk := resp.read(CHUNK):
            yield chunk


def _s3_chunks(url: str, offset: int, on_total: Callable[[int | None], None]) -> Iterator[bytes]:
    parsed = urllib.parse.urlparse(url)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    kwargs = {"Bucket": bucket, "Key": key}
    if offset:
        kwargs["Range"] = f"bytes={offset}-"
    client = _client()
    try:
        obj = client.get_object(**kwargs)
    except client.exceptions.NoSuchKey:
        raise FetchError(f"{url}: no such S3 object") from None
    on_total(offset + obj["ContentLength"])
    body = obj["Body"]
    while chunk := body.read(CHUNK):
        yield chunk


def _file_chunks(url: str, offset: int, on_total: Callable[[int | None], None]) -> Iterator[bytes]:
    path = urllib.request.url2pathname(urllib.parse.urlparse(url).path) if url.startswith("file://") else url
    if not os.path.isfile(path):
        raise FetchError(f"{url}: file not found")
    on_total(os.path.getsize(path))
    with open(path, "rb") as fh:
        fh.seek(offset)
        while chunk := fh.read(CHUNK):
            yield chunk


class Restart(Exception):
    """Internal control flow: the server cannot resume at our offset, so the download discards its part file and
    starts again (:func:`mtk.data_jobs.getdata._download` catches it; it never leaves the fetch)."""


def chunks_from(url: str) -> Callable[[str, int, Callable[[int | None], None]], Iterator[bytes]]:
    """The transport for ``url``: a function yielding its bytes from an offset, telling the total first."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in ("http", "https"):
        return http_chunks
    if scheme == "s3":
        return _s3_chunks
    if scheme in ("file", ""):
        return _file_chunks
    raise FetchError(f"{url}: unsupported scheme '{scheme}'; use http(s)://, s3://, file:// or a local path")
