"""Secrets by reference: which names look like credentials, whether the referenced ones are set, and how
to scrub their values out of anything mtk writes or prints.

A secret's *value* never enters the spec, a rendered file, an argv or a log: the spec names the variable
(``cluster.secrets``), the launching shell holds the value, and processes inherit it. Light on imports:
the CLI, the entrypoint and the engine all use it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

# Name parts (split on '_') that mark a credential, and whole names the ecosystem uses.
_SECRET_PARTS = {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PAT", "CREDENTIAL", "CREDENTIALS",
                 "APIKEY", "AUTH", "COOKIE", "SESSION", "PRIVATE"}
_SECRET_SUBSTRINGS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "API_KEY", "CREDENTIAL")
_KNOWN = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
          "HF_HUB_TOKEN", "WANDB_API_KEY", "GH_PAT", "GITHUB_TOKEN", "NGC_API_KEY", "OPENAI_API_KEY"}
# Variables whose names contain a marker but that hold no credential (paths, switches, sizes).
_NOT_SECRET = {"NCCL_IB_PKEY", "TORCH_NCCL_DUMP_ON_TIMEOUT", "MTK_SECRETS"}

REDACTED = "<redacted>"
# user:password@ in any URL-like value (HTTPS_PROXY=http://user:pw@proxy:3128).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s]+)@")
# Credential-bearing query parameters (?token=..., &sig=..., X-Amz-Signature=...).
_QUERY = re.compile(r"(?P<key>[?&;](?:[A-Za-z0-9_.-]*(?:token|key|secret|sig|signature|password|auth|"
                    r"credential)[A-Za-z0-9_.-]*))=(?P<val>[^&#\s]+)", re.IGNORECASE)
# 'Authorization: Bearer abc' / 'Bearer abc' in messages.
_BEARER = re.compile(r"(?P<key>\b(?:Bearer|Basic|token)\s+)(?P<val>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# Shortest value scrubbed by value: shorter ones ('1', 'true', '/usr') would mangle unrelated text.
MIN_SECRET_LEN = 6


def looks_secret(name: str) -> bool:
    """True for names that conventionally hold credentials (``HF_TOKEN``, ``*_API_KEY``, ``DB_PASS``...)."""
    upper = name.upper()
    if upper in _NOT_SECRET:
        return False
    if upper in _KNOWN or any(s in upper for s in _SECRET_SUBSTRINGS):
        return True
    return any(part in _SECRET_PARTS for part in upper.split("_"))


def missing(names: Iterable[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The referenced variables that the given (default: this process's) environment lacks or has empty."""
    env = os.environ if env is None else env
    return [n for n in names if not env.get(n)]


def secret_values(env: Mapping[str, str], names: Iterable[str] = ()) -> set[str]:
    """Values to scrub: those of the named secrets and of every variable whose name looks like a credential."""
    wanted = set(names)
    return {v for k, v in env.items() if (k in wanted or looks_secret(k)) and len(v) >= MIN_SECRET_LEN}


# Values this process read as credentials under names that need not look like one (a data.fetch[].auth variable
# named in cluster.secrets): the error boundary (:func:`mtk.failures.report`) scrubs them too.
_HELD: set[str] = set()


def hold(values: Iterable[str]) -> None:
    """Keep ``values`` out of any error message this process prints, as those of secret-looking names are."""
    _HELD.update(v for v in values if len(v) >= MIN_SECRET_LEN)


def held() -> set[str]:
    return set(_HELD)


def scrub(text: str, values: Iterable[str] = ()) -> str:
    """Remove secrets from free text: known values (longest first), URL userinfo, token query parameters,
    bearer/basic credentials. What remains says where a secret was, never what it was."""
    for value in sorted({v for v in values if len(v) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY.sub(lambda m: f"{m['key']}={REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m['key']}{REDACTED}", text)


def redact_env(env: Mapping[str, str], names: Iterable[str] = ()) -> dict[str, str]:
    """An environment safe to write down: secret-named variables show only that they are set (and their
    length), every other value is scrubbed of secret values, URL credentials and token parameters."""
    names = set(names)
    values = secret_values(env, names)
    out = {}
    for key, value in sorted(env.items()):
        if key in names or looks_secret(key):
            out[key] = f"{REDACTED} ({len(value)} chars)" if value else ""
        else:
            out[key] = scrub(value, values)
    return out


def require(job, backend: str) -> None:
    """Before submitting where the run inherits this shell's environment (Slurm, local): every referenced secret is
    set here."""
    from .backends import backend_class

    if not backend_class(backend).secrets_from_shell:
        return
    from .spec.errors import Problem, SpecError

    absent = set(missing(job.cluster.secret_names))
    problems = [Problem(f"cluster.secrets.{i}.name", f"{ref.name} is not set in this shell: export it before "
                        "`mtk launch` (the run inherits it from this environment; its value is never written to a "
                        "file)", ref.name)
                for i, ref in enumerate(job.cluster.secrets) if ref.name in absent]
    if problems:
        raise SpecError(problems)
