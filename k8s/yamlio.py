"""Serialise manifests with PyYAML: stable key order, multi-line strings as literal blocks (readable job.json)."""

from __future__ import annotations

from collections.abc import Iterable

import yaml


class _Dumper(yaml.SafeDumper):
    """A SafeDumper that never emits aliases and writes multi-line strings as ``|`` blocks."""

    def ignore_aliases(self, data) -> bool:
        return True


# Characters YAML itself treats as line breaks (or that a block scalar cannot carry): a raw one is folded or
# normalised on load, so such strings are written double-quoted, where they are escapes (\N, \L, \P, \r).
_YAML_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _str(dumper: yaml.SafeDumper, value: str):
    # PyYAML falls back to a quoted scalar by itself when a block is not allowed (e.g. trailing spaces).
    style = None
    if any(ch in value for ch in _YAML_BREAKS):
        style = '"'
    elif "\n" in value:
        style = "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(obj: dict) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096,
                     allow_unicode=True)


def dump_all(objs: Iterable[dict], header: str = "") -> str:
    """A multi-document stream that ``kubectl apply -f`` takes as is."""
    docs = [dump(o) for o in objs]
    return header + "---\n" + "---\n".join(docs)


def load_all(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]
