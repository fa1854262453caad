"""Bash's word expansion for :mod:`mtk.launcher.shell_script`: quotes, ``$NAME``, ``${NAME:-default}``,
``${NAME:=default}``, ``"${ARRAY[@]}"``, unquoted word splitting and ``$((arithmetic))``. A value the script leaves
unknown stays as written and the word names it (:attr:`Word.unresolved`); command substitutions are never run
(``$(pwd)`` and ``$PWD`` read as ``.``, said in :attr:`Word.assumed`)."""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
HERE = "$(pwd) / $PWD: the directory the script runs from, read as '.'"


@dataclass(frozen=True)
class Word:
    """One argument as bash would pass it; ``unresolved`` names what the script leaves unknown in it."""

    text: str
    unresolved: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()


def close_double(text: str, i: int) -> int:
    j = i + 1
    while j < len(text) and text[j] != '"':
        if text[j] == "\\":
            j += 1
        elif text.startswith(("$(", "${"), j):
            j = close_group(text, j + 1)
        j += 1
    return min(j, len(text) - 1)


def close_group(text: str, i: int) -> int:
    """The index of the bracket closing the one at ``i`` (``(`` or ``{``), quotes inside skipped."""
    pair = {"(": ")", "{": "}"}[text[i]]
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == text[i]:
            depth += 1
        elif c == pair:
            depth -= 1
            if depth == 0:
                return j
        elif c == "'":
            j = max(text.find("'", j + 1), j)
        elif c == '"':
            j = close_double(text, j)
        j += 1
    return len(text) - 1


class Env:
    """The script's variables: a scalar is one Word, an array a list of them (each keeps what it leaves unknown)."""

    def __init__(self) -> None:
        self.vars: dict[str, Word | list[Word]] = {}

    def scalar(self, name: str) -> Word | None:
        value = self.vars.get(name)
        if isinstance(value, list):
            return Word(" ".join(w.text for w in value), tuple(u for w in value for u in w.unresolved),
                        tuple(a for w in value for a in w.assumed))
        return value


@dataclass
class _Piece:
    text: str
    split: bool  # from an unquoted expansion: bash splits it into words
    unresolved: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    boundary: bool = False  # "${ARRAY[@]}": a word break before it


def expand(raw: str, env: Env) -> list[Word]:
    """The words bash makes of one raw word."""
    parts = pieces(raw, env, quoted=False)
    words: list[Word] = []
    cur: list[_Piece] = []
    had_quotes = "'" in raw or '"' in raw

    def flush(force: bool = False) -> None:
        if cur or force:
            words.append(Word("".join(p.text for p in cur), tuple(u for p in cur for u in p.unresolved),
                              tuple(a for p in cur for a in p.assumed)))
            cur.clear()

    for piece in parts:
        if piece.boundary:
            flush(force=True)
            continue
        if not piece.split:
            cur.append(piece)
            continue
        chunks = re.split(r"[ \t\n]+", piece.text)
        for k, part in enumerate(chunks):
            if k > 0:
                flush()
            if part:
                cur.append(_Piece(part, False, piece.unresolved, piece.assumed))
    if cur or (had_quotes and not words):
        flush(force=True)
    return words


def pieces(raw: str, env: Env, quoted: bool) -> list[_Piece]:
    out: list[_Piece] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n:
            nxt = raw[i + 1]
            keep = quoted and nxt not in '$`"\\'
            out.append(_Piece(("\\" if keep else "") + nxt, False))
            i += 2
        elif c == "'" and not quoted:
            j = raw.find("'", i + 1)
            j = n if j < 0 else j
            out.append(_Piece(raw[i + 1:j], False))
            i = j + 1
        elif c == '"' and not quoted:
            j = close_double(raw, i)
            inner = raw[i + 1:j]
            array = re.fullmatch(rf"\$\{{({_NAME})\[[@]\]\}}", inner)
            if array:  # "${ARRAY[@]}": one word per element
                for k, element in enumerate(array_of(env, array.group(1))):
                    if k:
                        out.append(_Piece("", False, boundary=True))
                    out.append(_Piece(element.text, False, element.unresolved, element.assumed))
            else:
                out.extend(_Piece(p.text, False, p.unresolved, p.assumed) for p in pieces(inner, env, quoted=True))
                out.append(_Piece("", False))
            i = j + 1
        elif c == "$" and not quoted and (array := re.match(rf"\$\{{({_NAME})\[[@*]\]\}}", raw[i:])):
            for k, element in enumerate(array_of(env, array.group(1))):  # unquoted: each element split on its own
                out.append(_Piece(" " if k else "", True))
                out.append(_Piece(element.text, True, element.unresolved, element.assumed))
            i += array.end()
        elif c == "$" and i + 1 < n:
            j, piece = _dollar(raw, i, env)
            out.append(_Piece(piece.text, not quoted, piece.unresolved, piece.assumed))
            i = j
        else:
            out.append(_Piece(c, False))
            i += 1
    return out


def array_of(env: Env, name: str) -> list[Word]:
    value = env.vars.get(name)
    return value if isinstance(value, list) else ([] if value is None else [value])


def _dollar(raw: str, i: int, env: Env) -> tuple[int, _Piece]:
    """Expand the ``$...`` at ``i``: (index after it, its text and what it leaves unknown)."""
    if raw.startswith("$((", i):
        j = close_group(raw, i + 1)
        expr = raw[i + 3:j - 1]
        return j + 1, _arithmetic(expr, env, raw[i:j + 1])
    if raw.startswith("$(", i):
        j = close_group(raw, i + 1)
        if raw[i + 2:j].strip() == "pwd":
            return j + 1, _Piece(".", False, (), (HERE,))
        return j + 1, _Piece(raw[i:j + 1], False, (raw[i:j + 1],))
    if raw.startswith("${", i):
        j = close_group(raw, i + 1)
        return j + 1, _braced(raw[i + 2:j], env, raw[i:j + 1])
    m = re.match(rf"{_NAME}|[0-9]|[@*#?$!]", raw[i + 1:])
    if not m:
        return i + 1, _Piece("$", False)
    return i + 1 + m.end(), _lookup(m.group(0), env, f"${m.group(0)}")


def _braced(body: str, env: Env, shown: str) -> _Piece:
    m = re.fullmatch(rf"({_NAME}|[0-9]+)(\[[@*]\])?(?:(:?)([-=+?])(.*))?", body, re.S)
    if not m:
        return _Piece(shown, False, (shown,))
    name, index, colon, op, word = m.groups()
    if index:
        elements = array_of(env, name)
        return _Piece(" ".join(w.text for w in elements), False, tuple(u for w in elements for u in w.unresolved),
                      tuple(a for w in elements for a in w.assumed))
    current = env.scalar(name)
    unset = current is None or bool(colon and current.text == "")
    if op in ("-", "=") and unset:
        parts = pieces(word or "", env, quoted=False)
        who = f"${name} (the script's argument {name})" if name.isdigit() else f"${name}"
        default = Word("".join(p.text for p in parts), tuple(u for p in parts for u in p.unresolved),
                       (*(a for p in parts for a in p.assumed),
                        f"{who} is not set in the script: its default {''.join(p.text for p in parts)!r} was used"))
        if op == "=":
            env.vars[name] = default
        return _Piece(default.text, False, default.unresolved, default.assumed)
    if op == "+":
        return _Piece("" if unset else "".join(p.text for p in pieces(word or "", env, quoted=False)), False)
    return _lookup(name, env, shown)


def _lookup(name: str, env: Env, shown: str) -> _Piece:
    value = env.scalar(name)
    if value is None and name == "PWD":
        return _Piece(".", False, (), (HERE,))
    if value is None:
        return _Piece(shown, False, (shown,))
    return _Piece(value.text, False, value.unresolved, value.assumed)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arithmetic(expr: str, env: Env, shown: str) -> _Piece:
    """``$((...))`` over integers; a name the script leaves unknown makes the whole value unknown."""
    missing: list[str] = []

    def value_of(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        v = env.scalar(name)
        if v is None or v.unresolved or not re.fullmatch(r"-?\d+", v.text.strip()):
            missing.append(f"${name}")
            return "0"
        return v.text.strip()

    text = re.sub(rf"\$\{{?({_NAME})\}}?|\b({_NAME})\b", value_of, expr)
    if missing:
        return _Piece(shown, False, tuple(missing))
    try:
        return _Piece(str(_eval(ast.parse(text.replace("/", "//"), mode="eval").body)), False)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return _Piece(shown, False, (shown,))


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return int(_OPS[type(node.op)](_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ValueError("not integer arithmetic")
