"""Bash's glob patterns (``case``, ``[[ x == pat ]]``, ``${X#pat}``, ``${X/pat/rep}``): quoted characters match
themselves, ``*``, ``?`` and ``[...]`` only where unquoted, as in bash. Matched by walking the pattern once over the
text (the positions it can reach), never by backtracking, and within :data:`MAX_WORK` steps: a pattern a hostile
script builds to be slow gives an unknown value (None), not a stall."""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_WORK = 2_000_000  # positions visited by one match, strip or replace
_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
            "space": r"\s", "blank": r" \t", "punct": r"!-/:-@\[-`{-~", "xdigit": "0-9A-Fa-f", "word": r"\w"}
Token = tuple  # ("lit", c) | ("any",) | ("star",) | ("cls", compiled one-character regex)


def tokens(pieces: list[tuple[str, bool]]) -> list[Token]:
    out: list[Token] = []
    for text, quoted in pieces:
        if quoted:
            out += [("lit", c) for c in text]
            continue
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                out.append(("lit", text[i + 1]))
                i += 2
                continue
            if c == "*":
                if not out or out[-1] != ("star",):
                    out.append(("star",))
            elif c == "?":
                out.append(("any",))
            elif c == "[" and (end := _bracket(text, i))[0] > 0:
                out.append(("cls", re.compile(end[1], re.S)))
                i = end[0]
            else:
                out.append(("lit", c))
            i += 1
    return out


def _bracket(text: str, i: int) -> tuple[int, str]:
    """(index of the closing ``]``, the regex class) for ``[...]`` at ``i``; (-1, "") when it does not close."""
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
                j, first = end + 2, False
                continue
        items.append("-" if c == "-" and items and j + 1 < len(text) and text[j + 1] != "]" else re.escape(c))
        first = False
        j += 1
    return -1, ""


def _ends(toks: list[Token], s: str, start: int, budget: list[int]) -> set[int] | None:
    """Every end ``e`` such that ``s[start:e]`` matches the whole pattern; None once ``budget`` (positions visited,
    shared by the walks of one match, strip or replace) is spent."""
    n = len(s)
    positions = {start}
    for tok in toks:
        budget[0] -= len(positions) + 1
        if budget[0] < 0:
            return None
        if tok[0] == "star":
            positions = set(range(min(positions), n + 1))
        elif tok[0] == "lit":
            positions = {p + 1 for p in positions if p < n and s[p] == tok[1]}
        elif tok[0] == "any":
            positions = {p + 1 for p in positions if p < n}
        else:
            positions = {p + 1 for p in positions if p < n and tok[1].fullmatch(s[p])}
        if not positions:
            break
    return positions


def _reversed(toks: list[Token]) -> list[Token]:
    return list(reversed(toks))


def matches(pieces: list[tuple[str, bool]], subject: str) -> bool | None:
    ends = _ends(tokens(pieces), subject, 0, [MAX_WORK])
    return None if ends is None else len(subject) in ends


def strip(subject: str, pieces: list[tuple[str, bool]], op: str) -> str | None:
    """``${X#pat}`` (shortest prefix), ``##`` (longest), ``%`` (shortest suffix), ``%%`` (longest); None when
    matching would take more than :data:`MAX_WORK` steps."""
    toks = tokens(pieces)
    if op in ("#", "##"):
        ends = _ends(toks, subject, 0, [MAX_WORK])
        if ends is None:
            return None
        return subject[(min(ends) if op == "#" else max(ends)):] if ends else subject
    lengths = _ends(_reversed(toks), subject[::-1], 0, [MAX_WORK])
    if lengths is None:
        return None
    if not lengths:
        return subject
    k = min(lengths) if op == "%" else max(lengths)
    return subject[:len(subject) - k]


def replace(subject: str, pieces: list[tuple[str, bool]], repl: str, op: str,
            fits: Callable[[int], None]) -> str | None:
    """``${X/pat/rep}`` (first), ``//`` (all), ``/#`` (at the start), ``/%`` (at the end): longest matches; None
    when matching would take more than :data:`MAX_WORK` steps. ``fits`` is told the result's size as it grows,
    before each piece is added (it raises past the value bound): ``${X//?/$X}`` is len(X)² characters."""
    toks = tokens(pieces)
    if not toks:
        return subject
    budget = [MAX_WORK]
    if op == "/%":
        lengths = _ends(_reversed(toks), subject[::-1], 0, budget)
        if lengths is None:
            return None
        if not lengths:
            return subject
        fits(len(subject) - max(lengths) + len(repl))
        return subject[:len(subject) - max(lengths)] + repl
    out: list[str] = []
    size, i, n = 0, 0, len(subject)
    while i <= n:
        found = _ends(toks, subject, i, budget) if i < n or op != "//" else set()
        if found is None:
            return None
        ends = {e for e in found if e > i}
        if ends:
            size += len(repl)
            fits(size + n - max(ends))
            out.append(repl)
            i = max(ends)
            if op != "//":
                break
            continue
        if op == "/#":
            return subject
        if i < n:
            size += 1
            out.append(subject[i])
        i += 1
    return "".join(out) + subject[i:]


def change_case(text: str, case: str) -> str | None:
    """Upper or lower case (``U``/``L``), or the first character's (``u``/``l``), as bash changes ASCII letters
    in any locale: one character for one, so the value keeps its size. None for other letters, whose case
    depends on the locale where the script runs."""
    if not (text if case in "UL" else text[:1]).isascii():
        return None
    whole = {"U": str.upper, "L": str.lower}[case.upper()]
    return whole(text) if case in "UL" else whole(text[:1]) + text[1:]
