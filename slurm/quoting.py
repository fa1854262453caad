"""Quoting for the two languages an sbatch file speaks: bash (the body) and sbatch's ``#SBATCH`` grammar.

bash: ``shlex.quote``, except that values with control characters use ANSI-C ``$'...'`` quoting with octal
escapes, because sbatch refuses any script that contains a carriage return followed by a newline.

``#SBATCH`` lines are parsed by sbatch itself, not by a shell: double quotes group words, a backslash
escapes the next character, an unescaped ``#`` ends the value, single quotes are literal. A newline cannot
be expressed at all, so values holding one are rejected with the field name.
"""

from __future__ import annotations

import re
import shlex

from mtk.exitcodes import BadInput

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_PLAIN_DIRECTIVE = re.compile(r"^[A-Za-z0-9_./:@%+=,-]+$")


class QuotingError(BadInput, ValueError):
    """A value that cannot be written into an sbatch file as-is; ``field`` names the spec field."""

    def __init__(self, field: str, value: str, why: str):
        self.field, self.value = field, value
        super().__init__(why)


def sh(value: object) -> str:
    """One shell word that bash reads back as exactly ``str(value)`` and never expands."""
    text = "1" if value is True else "0" if value is False else str(value)
    if "\x00" in text:
        raise QuotingError("", text, "contains a NUL character, which no shell variable can hold")
    if not _CONTROL.search(text):
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif _CONTROL.match(ch):
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def directive_value(value: str, field: str) -> str:
    """A value for an ``#SBATCH --opt=VALUE`` line that sbatch parses back verbatim."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise QuotingError(field, value, "contains a line break or NUL, which an #SBATCH line cannot carry")
    if _PLAIN_DIRECTIVE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("#", "\\#")
    return f'"{escaped}"'
