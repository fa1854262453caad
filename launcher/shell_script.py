"""Read a bash launch script the way bash would build its commands, without running anything.

Enough of bash for the shapes Megatron-LM launch scripts take: comments, line continuations, quoting,
``NAME=value`` / ``export`` / ``declare -a NAME=(...)`` / ``NAME+=(...)``, ``: "${NAME:=default}"``, ``$NAME``,
``${NAME:-default}``, ``"${ARRAY[@]}"`` and unquoted word splitting, ``$((arithmetic))`` and ``if [[ ... ]]; then
... else ... fi`` on string and number tests. What it cannot know — a variable the script does not set
(``$SLURM_JOB_NUM_NODES``), ``$(hostname)``, a file test — stays in the word as written and the word says so
(:attr:`Word.unresolved`); a default read for a variable the script leaves unset is recorded
(:attr:`Word.assumed`). Nothing is executed: command substitutions are never run.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

SEPARATORS = {"\n", ";", "&&", "||", "|", "&"}
HERE = "$(pwd) / $PWD: the directory the script runs from, read as '.'"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)


@dataclass(frozen=True)
class Word:
    """One argument as bash would pass it; ``unresolved`` names what the script leaves unknown in it."""

    text: str
    unresolved: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()


@dataclass
class Script:
    """A script read: its commands (control flow followed), ``#SBATCH`` options and what could not be decided."""

    commands: list[list[Word]] = field(default_factory=list)
    sbatch: list[str] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    arrays: dict[str, list[Word]] = field(default_factory=dict)  # the arrays as the script leaves them


# ------------------------------------------------------------------------------------------------ lexing


def _tokens(text: str) -> list[str]:
    """Raw words (quotes kept) and separators; comments and line continuations dropped."""
    out: list[str] = []
    cur: list[str] = []
    i, n = 0, len(text)

    def flush() -> None:
        if cur:
            out.append("".join(cur))
            cur.clear()

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                i += 2
                continue
            cur.append(text[i:i + 2])
            i += 2
        elif c in " \t\r":
            flush()
            i += 1
        elif c == "#" and not cur:
            while i < n and text[i] != "\n":
                i += 1
        elif c == "'":
            j = text.find("'", i + 1)
            j = n - 1 if j < 0 else j
            cur.append(text[i:j + 1])
            i = j + 1
        elif c == '"':
            j = _close_double(text, i)
            cur.append(text[i:j + 1])
            i = j + 1
        elif c == "$" and text.startswith(("$(", "${"), i):
            j = _close_group(text, i + 1)
            cur.append(text[i:j + 1])
            i = j + 1
        elif c in "\n;":
            flush()
            out.append("\n" if c == "\n" else ";")
            i += 1
        elif c in "&|":
            flush()
            two = text[i:i + 2]
            out.append(two if two in ("&&", "||") else c)
            i += 2 if two in ("&&", "||") else 1
        elif c in "()":
            flush()
            out.append(c)
            i += 1
        else:
            cur.append(c)
            i += 1
    flush()
    return out


def _close_double(text: str, i: int) -> int:
    j = i + 1
    while j < len(text) and text[j] != '"':
        if text[j] == "\\":
            j += 1
        elif text.startswith(("$(", "${"), j):
            j = _close_group(text, j + 1)
        j += 1
    return min(j, len(text) - 1)


def _close_group(text: str, i: int) -> int:
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
            j = _close_double(text, j)
        j += 1
    return len(text) - 1


# ------------------------------------------------------------------------------------------------ expansion


class _Env:
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


def expand(raw: str, env: _Env) -> list[Word]:
    """The words bash makes of one raw word."""
    pieces = _pieces(raw, env, quoted=False)
    words: list[Word] = []
    cur: list[_Piece] = []
    had_quotes = "'" in raw or '"' in raw

    def flush(force: bool = False) -> None:
        if cur or force:
            words.append(Word("".join(p.text for p in cur), tuple(u for p in cur for u in p.unresolved),
                              tuple(a for p in cur for a in p.assumed)))
            cur.clear()

    for piece in pieces:
        if piece.boundary:
            flush(force=True)
            continue
        if not piece.split:
            cur.append(piece)
            continue
        parts = re.split(r"[ \t\n]+", piece.text)
        for k, part in enumerate(parts):
            if k > 0:
                flush()
            if part:
                cur.append(_Piece(part, False, piece.unresolved, piece.assumed))
    if cur or (had_quotes and not words):
        flush(force=True)
    return words


def _pieces(raw: str, env: _Env, quoted: bool) -> list[_Piece]:
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
            j = _close_double(raw, i)
            inner = raw[i + 1:j]
            array = re.fullmatch(rf"\$\{{({_NAME})\[[@]\]\}}", inner)
            if array:  # "${ARRAY[@]}": one word per element
                for k, element in enumerate(_array(env, array.group(1))):
                    if k:
                        out.append(_Piece("", False, boundary=True))
                    out.append(_Piece(element.text, False, element.unresolved, element.assumed))
            else:
                out.extend(_Piece(p.text, False, p.unresolved, p.assumed) for p in _pieces(inner, env, quoted=True))
                out.append(_Piece("", False))
            i = j + 1
        elif c == "$" and not quoted and (array := re.match(rf"\$\{{({_NAME})\[[@*]\]\}}", raw[i:])):
            for k, element in enumerate(_array(env, array.group(1))):  # unquoted: each element split on its own
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


def _array(env: _Env, name: str) -> list[Word]:
    value = env.vars.get(name)
    return value if isinstance(value, list) else ([] if value is None else [value])


def _dollar(raw: str, i: int, env: _Env) -> tuple[int, _Piece]:
    """Expand the ``$...`` at ``i``: (index after it, its text and what it leaves unknown)."""
    if raw.startswith("$((", i):
        j = _close_group(raw, i + 1)
        expr = raw[i + 3:j - 1]
        return j + 1, _arithmetic(expr, env, raw[i:j + 1])
    if raw.startswith("$(", i):
        j = _close_group(raw, i + 1)
        if raw[i + 2:j].strip() == "pwd":
            return j + 1, _Piece(".", False, (), (HERE,))
        return j + 1, _Piece(raw[i:j + 1], False, (raw[i:j + 1],))
    if raw.startswith("${", i):
        j = _close_group(raw, i + 1)
        return j + 1, _braced(raw[i + 2:j], env, raw[i:j + 1])
    m = re.match(rf"{_NAME}|[0-9]|[@*#?$!]", raw[i + 1:])
    if not m:
        return i + 1, _Piece("$", False)
    return i + 1 + m.end(), _lookup(m.group(0), env, f"${m.group(0)}")


def _braced(body: str, env: _Env, shown: str) -> _Piece:
    m = re.fullmatch(rf"({_NAME}|[0-9]+)(\[[@*]\])?(?:(:?)([-=+?])(.*))?", body, re.S)
    if not m:
        return _Piece(shown, False, (shown,))
    name, index, colon, op, word = m.groups()
    if index:
        elements = _array(env, name)
        return _Piece(" ".join(w.text for w in elements), False, tuple(u for w in elements for u in w.unresolved),
                      tuple(a for w in elements for a in w.assumed))
    current = env.scalar(name)
    unset = current is None or bool(colon and current.text == "")
    if op in ("-", "=") and unset:
        parts = _pieces(word or "", env, quoted=False)
        who = f"${name} (the script's argument {name})" if name.isdigit() else f"${name}"
        default = Word("".join(p.text for p in parts), tuple(u for p in parts for u in p.unresolved),
                       (*(a for p in parts for a in p.assumed),
                        f"{who} is not set in the script: its default {''.join(p.text for p in parts)!r} was used"))
        if op == "=":
            env.vars[name] = default
        return _Piece(default.text, False, default.unresolved, default.assumed)
    if op == "+":
        return _Piece("" if unset else "".join(p.text for p in _pieces(word or "", env, quoted=False)), False)
    return _lookup(name, env, shown)


def _lookup(name: str, env: _Env, shown: str) -> _Piece:
    value = env.scalar(name)
    if value is None and name == "PWD":
        return _Piece(".", False, (), (HERE,))
    if value is None:
        return _Piece(shown, False, (shown,))
    return _Piece(value.text, False, value.unresolved, value.assumed)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arithmetic(expr: str, env: _Env, shown: str) -> _Piece:
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


# ------------------------------------------------------------------------------------------------ running


def read(text: str) -> Script:
    """The commands ``text`` would run, with ``#SBATCH`` lines and exports collected."""
    script = Script(sbatch=[line.strip()[len("#SBATCH"):].strip() for line in text.splitlines()
                            if line.strip().startswith("#SBATCH")])
    env = _Env()
    tokens = _tokens(text)
    _run(tokens, 0, len(tokens), env, script)
    script.arrays = {name: value for name, value in env.vars.items() if isinstance(value, list)}
    return script


def _statements(tokens: list[str], start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each statement; an array assignment ``NAME=( ... )`` spans lines."""
    out, i, begin = [], start, start
    while i < end:
        tok = tokens[i]
        if tok == "(":
            depth = 1
            i += 1
            while i < end and depth:
                depth += {"(": 1, ")": -1}.get(tokens[i], 0)
                i += 1
            continue
        if tok in SEPARATORS:
            if i > begin:
                out.append((begin, i))
            begin = i + 1
        i += 1
    if end > begin:
        out.append((begin, end))
    return out


def _run(tokens: list[str], start: int, end: int, env: _Env, script: Script) -> None:
    _run_statements(tokens, _statements(tokens, start, end), env, script)


def _run_statements(tokens: list[str], stmts: list[tuple[int, int]], env: _Env, script: Script) -> None:
    k = 0
    while k < len(stmts):
        s, e = stmts[k]
        if tokens[s] == "if":
            k = _run_if(tokens, stmts, k, env, script)
            continue
        _statement(tokens[s:e], env, script)
        k += 1


def _run_if(tokens: list[str], stmts: list[tuple[int, int]], k: int, env: _Env, script: Script) -> int:
    """Follow ``if``/``elif``/``else``/``fi`` from statement ``k``; returns the statement after ``fi``."""
    branches: list[tuple[list[str] | None, list[tuple[int, int]]]] = []
    depth, cond, body = 0, None, []  # type: ignore[var-annotated]
    j = k
    while j < len(stmts):
        s, e = stmts[j]
        head = tokens[s]
        if head == "if" and j != k:
            depth += 1
        if depth == 0 and head in ("if", "elif"):
            if cond is not None:
                branches.append((cond, body))
            cond, body = tokens[s + 1:e], []
            # "if [[ a ]] || [[ b ]]; then": the condition continues over || / && separators
            while tokens[e] in ("||", "&&") if e < len(tokens) else False:
                j += 1
                s2, e2 = stmts[j]
                cond += [tokens[e], *tokens[s2:e2]]
                e = e2
        elif depth == 0 and head in ("then", "else"):
            if head == "else":
                branches.append((cond, body))
                cond, body = None, []
            if e > s + 1:
                body.append((s + 1, e))
        elif head == "fi":
            if depth == 0:
                branches.append((cond, body))
                break
            depth -= 1
            body.append((s, e))
        else:
            body.append((s, e))
        j += 1
    for cond_words, branch in branches:
        verdict = True if cond_words is None else _test(cond_words, env)
        assumed = dict.fromkeys(a for w in (cond_words or []) for x in expand(w, env) for a in x.assumed)
        if verdict is not None and assumed:
            script.notes.append(f"condition `{' '.join(cond_words or [])}` read as {str(verdict).lower()} with "
                                + "; ".join(assumed))
        if verdict is None:
            script.notes.append(f"condition `{' '.join(cond_words or [])}` cannot be decided from the script; "
                                "read as true")
            verdict = True
        if verdict:
            _run_statements(tokens, branch, env, script)
            break
    return j + 1


def _test(words: list[str], env: _Env) -> bool | None:
    """``[[ ... ]]`` / ``[ ... ]`` joined by || and &&, left to right; None when a side cannot be decided."""
    result: bool | None = None
    op = None
    group: list[str] = []
    for w in [*words, "||"]:
        if w in ("||", "&&"):
            value = _one_test([g for g in group if g not in ("[[", "]]", "[", "]")], env)
            if op is None:
                result = value
            elif op == "||":
                result = True if result is True or value is True else None if None in (result, value) else False
            else:
                result = False if result is False or value is False else None if None in (result, value) else True
            op, group = w, []
        else:
            group.append(w)
    return result


def _one_test(words: list[str], env: _Env) -> bool | None:
    neg = bool(words) and words[0] == "!"
    words = words[1:] if neg else words
    vals = [expand(w, env) for w in words]
    if any(v.unresolved for ws in vals for v in ws):
        return None
    texts = [" ".join(v.text for v in ws) for ws in vals]
    result: bool | None = None
    if len(texts) == 2 and texts[0] in ("-z", "-n"):
        result = (texts[1] == "") == (texts[0] == "-z")
    elif len(texts) == 3:
        a, op, b = texts
        if op in ("==", "="):
            result = a == b
        elif op == "!=":
            result = a != b
        elif op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge") and re.fullmatch(r"-?\d+", a) and \
                re.fullmatch(r"-?\d+", b):
            x, y = int(a), int(b)
            result = {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
    return result if result is None or not neg else not result


def _statement(words: list[str], env: _Env, script: Script) -> None:
    if not words:
        return
    head = words[0]
    if head in ("export", "declare", "local", "readonly", "typeset"):
        k = 1
        while k < len(words) and words[k].startswith("-"):  # declare -a, export -n: its own options
            k += 1
        _assignments(words[k:], env, script, exported=head == "export")
        return
    if _ASSIGN.match(head):
        _assignments(words, env, script, exported=False)
        return
    command = [w for raw in words if raw not in ("(", ")") for w in expand(raw, env)]
    if command:
        script.commands.append(command)


def _assignments(words: list[str], env: _Env, script: Script, exported: bool) -> None:
    i = 0
    while i < len(words):
        m = _ASSIGN.match(words[i])
        if not m:
            i += 1
            continue
        name, append, value = m.groups()
        if value == "" and i + 1 < len(words) and words[i + 1] == "(":
            j = i + 2
            elements: list[Word] = []
            while j < len(words) and words[j] != ")":
                if words[j] not in SEPARATORS:
                    elements += expand(words[j], env)
                j += 1
            old = _array(env, name) if append else []
            env.vars[name] = [*old, *elements]
            i = j + 1
            continue
        parts = _pieces(value, env, quoted=False) if value else []  # no word splitting in an assignment
        new = Word("".join(p.text for p in parts), tuple(u for p in parts for u in p.unresolved),
                   tuple(a for p in parts for a in p.assumed))
        before = env.scalar(name) if append else None
        if before is not None:
            new = Word(before.text + new.text, before.unresolved + new.unresolved, before.assumed + new.assumed)
        env.vars[name] = new
        if exported:
            script.exports[name] = new.text
        i += 1
