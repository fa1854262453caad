"""Jinja2 rendering with StrictUndefined and safe filters: ``q`` shell-quotes, ``tojson`` serialises.

Every value interpolated into a shell script goes through ``q``; templates never paste raw strings.
A template that only switches blocks on flags (the sbatch step logic) is rendered by
:mod:`mtk.flag_template` instead, with these same settings, so a launch does not import Jinja2.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path


def shell_quote(value: object) -> str:
    """Quote one value for POSIX sh; lists become space-separated quoted words."""
    if isinstance(value, (list, tuple)):
        return " ".join(shell_quote(v) for v in value)
    if isinstance(value, bool):
        value = "1" if value else "0"
    return shlex.quote(str(value))


@cache
def _environment(folder: str):
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = shell_quote
    env.filters["tojson"] = lambda v: json.dumps(v, sort_keys=True)
    return env


def render_template(package_file: str, name: str, **context) -> str:
    """Render ``templates/<name>`` next to ``package_file`` (pass ``__file__`` of the owning module)."""
    folder = str(Path(package_file).parent / "templates")
    return _environment(folder).get_template(name).render(**context)
