"""``mtk-entrypoint getdata``: fetch the corpus and tokenizer files of ``data.fetch`` into ``data.dir``.

    mtk-entrypoint getdata --job RUN/job.json [--run-dir RUN]

Each item goes through three names: ``DEST.part`` (the raw bytes as downloaded, appended to on resume with an
HTTP ``Range`` request or an S3 ranged GET), ``DEST.tmp`` (decompressed .xz/.gz/.zst output, streamed from the
part file, SHA-256 computed on the way) and finally ``DEST`` by rename. The raw part file is what makes a
resume possible after a time limit or a dropped connection: a decompressor's state cannot be resumed, bytes
can. A checksum mismatch deletes both temp files and fails naming the URL, expected and actual digests.
A ``DEST.mtk-fetch.json`` record (URL, digest, size, mtime) makes a second run a no-op, and pins an item without
``sha256`` on first use: a later download from the same URL (the file was deleted, the data dir is reused) that
differs from the recorded digest is refused, so a moving upstream cannot change a corpus between runs unseen.

The data dir is often shared: side files are created with O_EXCL and opened with O_NOFOLLOW, so a symlink
planted under one of their names cannot redirect a write to a file the user owns elsewhere. An item with
``auth: NAME`` sends ``$NAME`` as a bearer token to the URL's own host only; a redirect to another host (a
CDN's signed URL) goes without it. No token or URL credential appears in a log line, record or error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from mtk.exitcodes import BadInput

from . import sources
from .sources import FetchError

if TYPE_CHECKING:
    from mtk.spec.data import FetchItem

RETRIES = 5
DECOMPRESSORS = (".xz", ".gz", ".zst")


class FetchInputError(BadInput, FetchError):
    """The spec or the environment is wrong (a missing secret, a path outside data.dir): exit code 2."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _create_excl(path: str, mode: str = "wb") -> IO:
    """A fresh side file: whatever (a stale temp, a planted symlink) has the name is removed first, then the
    file is created exclusively, so no write ever follows a link."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    return os.fdopen(fd, mode)


def _open_append(path: str) -> IO[bytes]:
    """The resumable part file: appended to, never through a symlink."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, 0o666)
    except OSError as exc:
        if os.path.islink(path):
            raise FetchInputError(f"{path} is a symlink; getdata never writes through one — remove it") from None
        raise exc
    return os.fdopen(fd, "ab")


@dataclass
class FetchResult:
    url: str
    path: str
    status: str  # "fetched" | "present"
    bytes: int
    seconds: float


class _Progress:
    """A live bar on a terminal, a plain line every ``every`` seconds in batch logs."""

    def __init__(self, name: str, total: int | None, live: bool | None = None, every: float = 10.0):
        self.name, self.total = name, total
        self.live = sys.stderr.isatty() if live is None else live
        self.every = every
        self.t0 = self.last = time.monotonic()

    def __call__(self, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if not (final or (self.live and now - self.last >= 0.2) or now - self.last >= self.every):
            return
        self.last = now
        rate = done / 2**20 / max(now - self.t0, 1e-9)
        if self.total:
            pct = 100 * done / self.total
            bar = "#" * int(pct / 5)
            text = f"getdata: {self.name} [{bar:<20}] {pct:5.1f}% {done / 2**20:,.1f} MiB {rate:,.1f} MiB/s"
        else:
            text = f"getdata: {self.name} {done / 2**20:,.1f} MiB {rate:,.1f} MiB/s"
        if self.live:
            print("\r" + text, end="\n" if final else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)


def destination(item: FetchItem, data_dir: str) -> str:
    """Where ``item`` ends up: ``item.path`` or the URL's file name (minus a compression suffix it undoes);
    always inside ``data_dir``, symlinked directories included."""
    if item.path:
        dest = os.path.join(data_dir, item.path)
        root = os.path.realpath(data_dir)
        if os.path.isabs(item.path) or os.path.commonpath([root, os.path.realpath(dest)]) != root:
            raise FetchInputError(f"data.fetch path {item.path!r} leads outside data.dir ({data_dir}); use a path "
                                  "relative to data.dir without '..'")
        return dest
    name = os.path.basename(urllib.parse.urlparse(item.url).path) or "download"
    if item.decompress:
        name = next((name[: -len(s)] for s in DECOMPRESSORS if name.endswith(s) and len(name) > len(s)), name)
    return os.path.join(data_dir, name)


def _compression(item: FetchItem) -> str:
    path = urllib.parse.urlparse(item.url).path
    return next((s for s in DECOMPRESSORS if path.endswith(s)), "") if item.decompress else ""


# ---------------------------------------------------------------- download, decompress, verify

def _attempt(url: str, part: str, name: str, live: bool | None, auth: tuple[str, str] | None = None) -> None:
    """One pass: append to ``part`` from its current size; raises ConnectionError on a short read."""
    chunks = sources.chunks_from(url)
    if auth is not None:
        import functools

        chunks = functools.partial(sources.http_chunks, auth_name=auth[0], token=auth[1])
    done = os.path.getsize(part) if os.path.exists(part) else 0
    state: dict = {"total": None, "progress": None}

    def set_total(n: int | None) -> None:
        state["total"] = n
        state["progress"] = _Progress(name, n, live)

    with _open_append(part) as out:
        for chunk in chunks(url, done, set_total):
            out.write(chunk)
            done += len(chunk)
            state["progress"](done)
    if state["total"] is not None and done < state["total"]:
        raise ConnectionError(f"connection closed at {done} of {state['total']} bytes")
    if state["progress"]:
        state["progress"](done, final=True)


def _download(url: str, part: str, progress_live: bool | None, auth: tuple[str, str] | None = None) -> None:
    """Fill ``part`` with the whole object, resuming from its current size after a dropped connection."""
    name = os.path.basename(part).removesuffix(".part")
    for attempt in range(RETRIES + 1):
        try:
            _attempt(url, part, name, progress_live, auth)
            return
        except sources.Restart:
            os.unlink(part)
        except FetchError:
            raise
        except (OSError, urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
            if attempt == RETRIES:
                have = os.path.getsize(part) if os.path.exists(part) else 0
                raise FetchError(f"{url}: giving up after {RETRIES + 1} attempts: {exc}; rerun getdata to resume "
                                 f"from byte {have}") from None
            wait = min(2.0**attempt, 30.0) * 0.1
            print(f"getdata: {_safe_url(url)}: {exc}; resuming in {wait:.1f} s (attempt {attempt + 2}/{RETRIES + 1})",
                  file=sys.stderr, flush=True)
            time.sleep(wait)


def _open_decompressed(path: str, kind: str) -> IO[bytes]:
    from .corpus import InputError
    from .jsonl import open_binary

    try:
        return open_binary(path, kind)
    except InputError as exc:
        raise FetchError(str(exc)) from None


def _finalize(part: str, tmp: str, kind: str, url: str) -> str:
    """Stream ``part`` (decompressing) into ``tmp``; return the SHA-256 of what was written."""
    digest = hashlib.sha256()
    try:
        with _open_decompressed(part, kind) as src, _create_excl(tmp) as out:
            while block := src.read(sources.CHUNK):
                digest.update(block)
                out.write(block)
    except (OSError, EOFError, ValueError) as exc:
        for p in (part, tmp):
            if os.path.exists(p):
                os.unlink(p)
        raise FetchError(f"{url}: cannot decompress ({exc}); the download was discarded, rerun getdata") from None
    return digest.hexdigest()


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(sources.CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _record_path(dest: str) -> str:
    return f"{dest}.mtk-fetch.json"


def _is_complete(item: FetchItem, dest: str) -> bool:
    if not os.path.isfile(dest):
        return False
    st = os.stat(dest)
    try:
        with open(_record_path(dest)) as fh:
            rec = json.load(fh)
        if rec.get("url") != item.url:
            return False  # fetched from another URL: the spec changed
        if rec.get("size") == st.st_size and rec.get("mtime") == st.st_mtime:
            return item.sha256 in (None, rec.get("sha256"))
    except (OSError, ValueError):
        pass
    if item.sha256 is None:
        return True  # a file put there by hand; nothing to verify it against
    if _sha256(dest) == item.sha256:
        _write_record(item, dest, item.sha256)
        return True
    return False


def _write_record(item: FetchItem, dest: str, sha: str) -> None:
    st = os.stat(dest)
    rec = {"url": item.url, "sha256": sha, "size": st.st_size, "mtime": st.st_mtime}
    tmp = f"{_record_path(dest)}.tmp"
    with _create_excl(tmp, "w") as fh:
        json.dump(rec, fh)
    os.replace(tmp, _record_path(dest))


def _first_fetch_digest(item: FetchItem, dest: str) -> str | None:
    """The SHA-256 recorded when this URL was last fetched into ``dest`` (trust on first use), if any."""
    try:
        with open(os.open(_record_path(dest), os.O_RDONLY | _NOFOLLOW)) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    sha = rec.get("sha256") if isinstance(rec, dict) and rec.get("url") == item.url else None
    return sha if isinstance(sha, str) else None


def _claim_part(part: str, url: str) -> None:
    """Resume a part file only if it came from the same URL (``PART.url`` says which)."""
    marker = f"{part}.url"
    try:
        with open(os.open(marker, os.O_RDONLY | _NOFOLLOW)) as fh:
            same = fh.read() == url
    except OSError:
        same = False
    if not same:
        if os.path.exists(part):
            os.unlink(part)
        with _create_excl(f"{marker}.tmp", "w") as fh:
            fh.write(url)
        os.replace(f"{marker}.tmp", marker)


def fetch(item: FetchItem, data_dir: str, progress: bool | None = None) -> FetchResult:
    """Fetch one item (idempotent, resumable, verified); raises FetchError with the URL on failure."""
    t0 = time.monotonic()
    dest = destination(item, data_dir)
    if _is_complete(item, dest):
        return FetchResult(item.url, dest, "present", os.path.getsize(dest), 0.0)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    part, tmp = f"{dest}.part", f"{dest}.tmp"
    auth = None
    if item.auth:
        token = os.environ.get(item.auth)
        if not token:
            raise FetchInputError(f"{item.url}: data.fetch auth names {item.auth}, which is not set in this step's "
                                  f"environment: list it under cluster.secrets and export it where you launch "
                                  f"(EKS: put it in the Kubernetes Secret)")
        auth = (item.auth, token)
    trusted = None if item.sha256 else _first_fetch_digest(item, dest)
    _claim_part(part, item.url)
    _download(item.url, part, progress, auth)
    kind = _compression(item)
    if kind:
        sha = _finalize(part, tmp, kind, item.url)
    else:
        sha = _sha256(part)
        tmp = part
    if item.sha256 and sha != item.sha256:
        for p in {part, tmp, f"{part}.url"}:
            if os.path.exists(p):
                os.unlink(p)
        raise FetchError(f"{item.url}: SHA-256 mismatch: expected {item.sha256}, got {sha}; the download was "
                         "deleted. Check data.fetch[].sha256 or the source.")
    if trusted and sha != trusted:
        for p in {part, tmp, f"{part}.url"}:
            if os.path.exists(p):
                os.unlink(p)
        raise FetchError(f"{_safe_url(item.url)}: this download differs from what was fetched from it before: "
                         f"{_record_path(dest)} holds SHA-256 {trusted}, this download is {sha}; it was deleted and "
                         f"nothing was replaced. If upstream changed on purpose, pin the new content with "
                         f"data.fetch[].sha256: {sha}, or delete that record to trust it.")
    os.replace(tmp, dest)
    for p in (part, f"{part}.url"):
        if os.path.exists(p):
            os.unlink(p)
    _write_record(item, dest, sha)
    return FetchResult(item.url, dest, "fetched", os.path.getsize(dest), time.monotonic() - t0)


def fetch_all(items: list[FetchItem], data_dir: str, progress: bool | None = None,
              log: Callable[[str], None] = print) -> list[FetchResult]:
    """Fetch every item in order; stops at the first failure (already fetched files stay)."""
    results = []
    for item in items:
        if item.url.startswith("http://") and not item.sha256:
            log(f"getdata: warning: {_safe_url(item.url)} is plain HTTP without a sha256: anyone on the path can "
                "change what is downloaded; use https:// or set data.fetch[].sha256")
        res = fetch(item, data_dir, progress)
        if res.status == "present":
            log(f"getdata: {res.path}: complete, nothing to do")
        else:
            log(f"getdata: {res.path}: {res.bytes / 2**20:,.1f} MiB in {res.seconds:.1f} s")
        results.append(res)
    return results


def _safe_url(url: str) -> str:
    from mtk.secrets import scrub

    return scrub(url)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mtk-entrypoint getdata", description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True, help="job.json of the run (data.fetch and data.dir)")
    ap.add_argument("--run-dir", help="run directory (accepted for symmetry with other steps)")
    ap.add_argument("--data-dir", help="override data.dir")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    from mtk.spec import load_job_json

    data = load_job_json(args.job).data
    data_dir = args.data_dir or data.dir
    if not data.fetch:
        print("getdata: data.fetch is empty; nothing to fetch")
        return 0
    from mtk.secrets import hold, scrub

    tokens = [os.environ[i.auth] for i in data.fetch if i.auth and os.environ.get(i.auth)]
    hold(tokens)  # a FetchError (exit 1; FetchInputError: 2) reaches the error boundary, which scrubs these too
    fetch_all(data.fetch, data_dir, log=lambda m: print(scrub(m, tokens), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
