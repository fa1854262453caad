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

import re
from dataclasses import dataclass, field

from .shell_expand import Env, Word, array_of, close_double, close_group, expand, pieces

SEPARATORS = {"\n", ";", "&&", "||", "|", "&"}
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
DECLARATIONS = frozenset({"export", "declare", "local", "readonly", "typeset"})  # bash's, not backends
_ASSIGN = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)


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
            j = close_double(text, i)
            cur.append(text[i:j + 1])
            i = j + 1
        elif c == "$" and text.startswith(("$(", "${"), i):
            j = close_group(text, i + 1)
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


# ------------------------------------------------------------------------------------------------ running


def read(text: str) -> Script:
    """The commands ``text`` would run, with ``#SBATCH`` lines and exports collected."""
    script = Script(sbatch=[line.strip()[len("#SBATCH"):].strip() for line in text.splitlines()
                            if line.strip().startswith("#SBATCH")])
    env = Env()
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


def _run(tokens: list[str], start: int, end: int, env: Env, script: Script) -> None:
    _run_statements(tokens, _statements(tokens, start, end), env, script)


def _run_statements(tokens: list[str], stmts: list[tuple[int, int]], env: Env, script: Script) -> None:
    k = 0
    while k < len(stmts):
        s, e = stmts[k]
        if tokens[s] == "if":
            k = _run_if(tokens, stmts, k, env, script)
            continue
        _statement(tokens[s:e], env, script)
        k += 1


def _run_if(tokens: list[str], stmts: list[tuple[int, int]], k: int, env: Env, script: Script) -> int:
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


def _test(words: list[str], env: Env) -> bool | None:
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


def _one_test(words: list[str], env: Env) -> bool | None:
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


def _statement(words: list[str], env: Env, script: Script) -> None:
    if not words:
        return
    head = words[0]
    if head in DECLARATIONS:
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


def _assignments(words: list[str], env: Env, script: Script, exported: bool) -> None:
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
            old = array_of(env, name) if append else []
            env.vars[name] = [*old, *elements]
            i = j + 1
            continue
        parts = pieces(value, env, quoted=False) if value else []  # no word splitting in an assignment
        new = Word("".join(p.text for p in parts), tuple(u for p in parts for u in p.unresolved),
                   tuple(a for p in parts for a in p.assumed))
        before = env.scalar(name) if append else None
        if before is not None:
            new = Word(before.text + new.text, before.unresolved + new.unresolved, before.assumed + new.assumed)
        env.vars[name] = new
        if exported:
            script.exports[name] = new.text
        i += 1
