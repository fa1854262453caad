"""Unverified downloads: a ``data.fetch`` item over plain HTTP without ``sha256`` is refused, one over https without
``sha256`` is warned about at validate and launch.

Why refuse the first: over plain HTTP anyone on the path can change the bytes, and nothing after the download
could notice — getdata's trust-on-first-use record would pin the substitute. The fix costs one line (``sha256:``,
``sha256sum FILE``) or an ``s`` (https). Loopback URLs are exempt: nothing on the path but this machine.
Why only warn for the second: TLS authenticates the host, and a file whose digest nobody published (the OSCAR
sample of the examples) can only be pinned after a first download; getdata records that download's SHA-256
beside the file (``DEST.mtk-fetch.json``) and refuses a later one that differs. The warning says how to pin it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import check
from .errors import Problem
from .safety_checks import _loopback

if TYPE_CHECKING:
    from .job import Job


def _plain_http(url: str) -> bool:
    return url.startswith("http://") and not _loopback(url)


@check
def plain_http_fetch_is_pinned(job: Job, backend) -> list[Problem]:
    return [Problem(f"data.fetch.{i}.url", "plain HTTP without sha256: anyone on the path can change what is "
                    "downloaded and nothing would notice. Use https://, or set sha256 to the SHA-256 of the final "
                    "(decompressed) file (sha256sum FILE)", item.url)
            for i, item in enumerate(job.data.fetch) if _plain_http(item.url) and not item.sha256]


def unverified_fetches(job: Job) -> list[str]:
    """One warning line per https item without sha256 (plain HTTP ones are refused above), with the fix."""
    out = []
    for i, item in enumerate(job.data.fetch):
        if item.sha256 or not item.url.startswith(("http://", "https://")) or _plain_http(item.url):
            continue
        dest = item.path or item.url.rstrip("/").rsplit("/", 1)[-1]
        if item.decompress and not item.path:
            dest = dest.removesuffix(".xz").removesuffix(".gz").removesuffix(".zst")
        trusted = " (trust_first_fetch: the first download is trusted as is)" if item.trust_first_fetch else ""
        out.append(f"warning: data.fetch.{i} ({item.url}) has no sha256{trusted}: nothing checks what the first "
                   f"download brings; add sha256: <SHA-256 of the final file> to pin it (getdata records it in "
                   f"{job.data.dir}/{dest}.mtk-fetch.json after the first fetch)")
    return out
