"""Bash's glob patterns (``case``, ``[[ x == pat ]]``, ``${X#pat}``) as regular expressions. Quoted characters
match themselves; ``*``, ``?`` and ``[...]`` only where unquoted, as in bash."""

from __future__ import annotations

import re

_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
            "space": r"\s", "blank": r" \t", "punct": r"!-/:-@\[-`{-~", "xdigit": "0-9A-Fa-f", "word": r"\w"}


def translate(pieces: list[tuple[str, bool]], lazy: bool = False) -> str:
    """The regular expression for a pattern given as (text, quoted) pieces."""
    out: list[str] = []
    for text, quoted in pieces:
        if quoted:
            out.append(re.escape(text))
            continue
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                out.append(re.escape(text[i + 1]))
                i += 2
                continue
            if c == "*":
                out.append(".*?" if lazy else ".*")
            elif c == "?":
                out.append(".")
            elif c == "[":
                end, cls = _bracket(text, i)
                if end < 0:
                    out.append(re.escape(c))
                else:
                    out.append(cls)
                    i = end
            else:
                out.append(re.escape(c))
            i += 1
    return "".join(out)


def _bracket(text: str, i: int) -> tuple[int, str]:
    """(index of the closing ``]``, the regex class) for ``[...]`` at ``i``; -1 when it does not close."""
    j = i + 1
    negate = j < len(text) and text[j] in "!^"
    j += negate
    items: list[str] = []
    first = True
    while j < len(text):
        c = text[j]
        if c == "]" and not first:
            return j, "[" + ("^" if negate else "") + "".join(items) + "]"
        if text.startswith("[:", j):
            end = text.find(":]", j + 2)
            name = text[j + 2:end] if end > 0 else ""
            if name in _CLASSES:
                items.append(_CLASSES[name])
                j = end + 2
                first = False
                continue
        if c == "-" and items and j + 1 < len(text) and text[j + 1] != "]":
            items.append("-")
        else:
            items.append(re.escape(c) if c not in "-" else r"\-")
        first = False
        j += 1
    return -1, ""


def matches(pieces: list[tuple[str, bool]], subject: str) -> bool:
    return re.fullmatch(translate(pieces), subject, re.S) is not None


MAX_SUBJECT = 4096  # pattern removal tries every prefix or suffix: bounded so a hostile value stays cheap


def strip(subject: str, pieces: list[tuple[str, bool]], op: str) -> str | None:
    """``${X#pat}`` (shortest prefix), ``##`` (longest), ``%`` (shortest suffix), ``%%`` (longest); None for a
    value too long to try (the caller says so)."""
    n = len(subject)
    if n > MAX_SUBJECT:
        return None
    pattern = re.compile(translate(pieces), re.S)
    order = range(n + 1) if op in ("#", "%") else range(n, -1, -1)
    for k in order:
        if op in ("#", "##") and pattern.fullmatch(subject, 0, k):
            return subject[k:]
        if op in ("%", "%%") and pattern.fullmatch(subject, n - k):
            return subject[:n - k]
    return subject


def replace(subject: str, pieces: list[tuple[str, bool]], repl: str, op: str) -> str | None:
    """``${X/pat/rep}`` (first), ``//`` (all), ``/#`` (at the start), ``/%`` (at the end): longest matches."""
    if not pieces or not "".join(t for t, _ in pieces):
        return subject
    if len(subject) > MAX_SUBJECT:
        return None
    body = translate(pieces)
    if op == "/#":
        return re.sub(f"^(?:{body})", lambda _: repl, subject, count=1, flags=re.S)
    if op == "/%":
        return re.sub(f"(?:{body})$", lambda _: repl, subject, count=1, flags=re.S)
    return re.sub(body, lambda _: repl, subject, count=0 if op == "//" else 1, flags=re.S)
