"""What must never reach a file or the wire in clear: credentials in ``cluster.env`` or fetch URLs, tokens over
plain HTTP, fetch destinations outside ``data.dir``, moving revisions without a pin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import Problem

if TYPE_CHECKING:
    from .job import Job


def credentials_by_reference(job: Job, backend) -> list[Problem]:
    """A credential in ``cluster.env`` would be written in clear into job.json, scripts and manifests."""
    from mtk.secrets import looks_secret

    c, out = job.cluster, []
    for name in c.env:
        if looks_secret(name):
            out.append(Problem(f"cluster.env.{name}", "looks like a credential: its value would be written in "
                               "clear into job.json, the run scripts and the manifests. Remove it from cluster.env, "
                               f"list it under cluster.secrets (cluster.secrets: [{name}]) and export {name} in the "
                               "shell that launches (EKS: store it in a Kubernetes Secret)"))
    seen: set[str] = set()
    for i, ref in enumerate(c.secrets):
        if ref.name in seen:
            out.append(Problem(f"cluster.secrets.{i}.name", "listed twice; keep one entry", ref.name))
        if ref.name in c.env:
            out.append(Problem(f"cluster.secrets.{i}.name", f"also set in cluster.env.{ref.name}; a secret comes "
                               "only from the environment (or Secret) it references", ref.name))
        seen.add(ref.name)
    return out


def fetch_items_are_safe(job: Job, backend) -> list[Problem]:
    """Fetch destinations stay inside data.dir; auth names a declared secret and never rides plain HTTP."""
    import posixpath

    out, secrets = [], set(job.cluster.secret_names)
    for i, item in enumerate(job.data.fetch):
        if item.path is not None:
            norm = posixpath.normpath(item.path)
            if posixpath.isabs(item.path) or norm == ".." or norm.startswith("../") or norm in (".", ""):
                out.append(Problem(f"data.fetch.{i}.path", "must be a file path relative to data.dir that stays "
                                   "inside it (no leading '/', no '..')", item.path))
        if _url_carries_credentials(item.url):
            out.append(Problem(f"data.fetch.{i}.url", "carries a credential (user:password@ or a token/signature "
                               "parameter), which would be written into job.json and the manifests; put the token "
                               "in a secret and reference it: auth: HF_TOKEN (listed in cluster.secrets)"))
        if item.auth is not None:
            if item.auth not in secrets:
                out.append(Problem(f"data.fetch.{i}.auth", f"names no secret: add it to cluster.secrets "
                                   f"(cluster.secrets: [{item.auth}]) so the value reaches the getdata step",
                                   item.auth))
            if not (item.url.startswith("https://") or _loopback(item.url)):
                out.append(Problem(f"data.fetch.{i}.auth", "a token is only sent over https:// (or to this "
                                   "machine's loopback address); fix the URL", item.url))
    return out


def fetch_is_pinned(job: Job, backend) -> list[Problem]:
    """A fetch from a moving revision (a branch, ``latest``) without sha256 changes every later run's data
    silently when upstream pushes; it must be pinned, or say that it trusts its first download."""
    from .fetch_pins import moving_ref

    out = []
    for i, item in enumerate(job.data.fetch):
        ref = moving_ref(item.url)
        if ref and not item.sha256 and not item.trust_first_fetch:
            out.append(Problem(f"data.fetch.{i}.url", f"names the moving revision {ref!r} and has no sha256: what "
                               "it downloads changes whenever upstream pushes. Put a commit id in the URL and set "
                               "sha256 (of the final, decompressed file), or set trust_first_fetch: true to have "
                               "getdata record the first download's SHA-256 and refuse a later one that differs",
                               item.url))
    return out


def _url_carries_credentials(url: str) -> bool:
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if parsed.password or (parsed.username and parsed.scheme in ("http", "https")):
        return True
    from mtk.secrets import looks_secret

    names = [k for k, _ in urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)]
    return any(looks_secret(k.replace("-", "_")) or "signature" in k.lower() for k in names)


def _loopback(url: str) -> bool:
    import ipaddress
    import urllib.parse

    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
