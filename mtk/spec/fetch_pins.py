"""Which fetch URLs name a moving reference (a branch, ``latest``) rather than fixed content.

A file fetched from ``…/resolve/main/…`` is whatever that branch holds on the day the data step runs: a push
upstream changes the corpus or the tokenizer of every later run without a word. Such a URL needs a
``sha256`` (or an explicit ``trust_first_fetch``), which ``safety_checks.fetch_is_pinned`` enforces at validate.
"""

from __future__ import annotations

import re
import urllib.parse

COMMIT = re.compile(r"[0-9a-f]{40}")
MOVING_NAMES = {"main", "master", "latest", "head", "trunk", "develop", "dev", "nightly"}
_HF_HOSTS = {"huggingface.co", "hf.co", "www.huggingface.co"}
_GITHUB_RAW = "raw.githubusercontent.com"


def moving_ref(url: str) -> str | None:
    """The moving part of an http(s) ``url`` (e.g. ``main``), or None when it names fixed content."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    host = (parts.hostname or "").lower()
    segments = [urllib.parse.unquote(s) for s in parts.path.split("/") if s]
    revision = None
    if host in _HF_HOSTS and "resolve" in segments:
        i = segments.index("resolve")
        revision = segments[i + 1] if i + 1 < len(segments) else None
    elif host == _GITHUB_RAW and len(segments) >= 3:
        revision = segments[2]  # raw.githubusercontent.com/OWNER/REPO/REF/path
    elif host == "github.com" and len(segments) >= 4 and segments[2] in ("raw", "blob"):
        revision = segments[3]
    if revision is not None:
        return None if COMMIT.fullmatch(revision) else revision
    for key, value in urllib.parse.parse_qsl(parts.query):
        if key.lower() in ("ref", "revision", "branch") and not COMMIT.fullmatch(value):
            return value
    return next((s for s in segments[:-1] if s.lower() in MOVING_NAMES), None)
