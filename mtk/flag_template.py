"""Render a template whose only logic is ``{% if %}`` blocks over boolean flags, without importing Jinja2.

The sbatch step logic (``slurm/templates/step.sh.j2``) interpolates no values: six flags pick its blocks.
Importing and compiling Jinja2 for that was ~40 ms of every ``mtk launch --backend slurm`` (a tenth of the
command on a 2-core machine). This renders the Jinja subset such a file uses — ``if`` / ``elif`` / ``else`` /
``endif`` over flag names joined by ``and`` / ``or`` / ``not`` — byte for byte as Jinja does with
``trim_blocks``, ``lstrip_blocks`` and ``keep_trailing_newline`` (the settings of :mod:`mtk.templating`),
so the file stays a valid Jinja template and the tests render it both ways. Anything outside the subset
(``{{ }}``, ``{# #}``, other tags, an unknown flag) is refused with its line, never passed through.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

# A block tag; with lstrip_blocks the blanks before it go when only blanks precede it on its line, and with
# trim_blocks the one newline right after it goes.
_TAG = re.compile(r"(?m)(?:^[ \t]*)?\{%(?P<body>.*?)%\}\n?", re.S)
_UNSUPPORTED = re.compile(r"\{\{|\{#|\{%-|-%\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WORDS = {"and", "or", "not"}

Node = tuple  # ("text", str) | ("if", [(condition, [Node, ...]), ...]); a condition of None is the else branch


class TemplateError(ValueError):
    """Internal: a shipped template uses something outside the supported subset, or its blocks do not balance —
    mtk's own mistake, never the user's, so the error boundary shows it as a bug with its traceback."""


def render_flags(package_file: str, name: str, **flags: bool) -> str:
    """Render ``templates/<name>`` next to ``package_file`` with ``flags`` (every name the template tests)."""
    return _render_checked(_parsed(str(Path(package_file).parent / "templates" / name)), flags)


def _render_checked(nodes: list[Node], flags: dict[str, bool]) -> str:
    """Every flag the template tests must be given (Jinja's StrictUndefined would raise on the first it
    evaluates; here a branch not taken cannot hide a misspelt flag)."""
    missing = sorted(_names(nodes) - flags.keys())
    if missing:
        raise TemplateError(f"the template tests flags that were not given: {', '.join(missing)}")
    return _render(nodes, flags)


@cache
def _parsed(path: str) -> list[Node]:
    return parse(Path(path).read_text(), path)


def parse(text: str, where: str = "<template>") -> list[Node]:
    """The template as a tree of text and if-blocks; a bad tag or unbalanced block raises TemplateError."""
    bad = _UNSUPPORTED.search(text)
    if bad:
        raise TemplateError(f"{where}:{_line(text, bad.start())}: '{bad.group()}' is not supported here "
                            "(only {% if %}/{% elif %}/{% else %}/{% endif %} over flags)")
    root: list[Node] = []
    # each open block: (its branches, the list it sits in, the line it opened on, whether its else was seen)
    stack: list[tuple[list, list, int, bool]] = []
    out = root
    pos = 0
    for match in _TAG.finditer(text):
        if match.start() > pos:
            out.append(("text", text[pos:match.start()]))
        pos = match.end()
        line = _line(text, match.start("body"))
        words = match.group("body").split()
        keyword, condition = (words[0], words[1:]) if words else ("", [])
        if keyword == "if":
            branches: list = [(_condition(condition, where, line), [])]
            out.append(("if", branches))
            stack.append((branches, out, line, False))
            out = branches[0][1]
        elif keyword in ("elif", "else", "endif"):
            if not stack:
                raise TemplateError(f"{where}:{line}: '{keyword}' without an open 'if'")
            branches, parent, opened, seen_else = stack[-1]
            if keyword == "endif":
                if condition:
                    raise TemplateError(f"{where}:{line}: 'endif' takes nothing after it")
                stack.pop()
                out = parent
                continue
            if seen_else:
                raise TemplateError(f"{where}:{line}: '{keyword}' after 'else' (the if of line {opened})")
            if keyword == "else" and condition:
                raise TemplateError(f"{where}:{line}: 'else' takes nothing after it")
            branches.append((_condition(condition, where, line) if keyword == "elif" else None, []))
            stack[-1] = (branches, parent, opened, keyword == "else")
            out = branches[-1][1]
        else:
            raise TemplateError(f"{where}:{line}: '{{% {match.group('body').strip()} %}}' is not supported here "
                                "(only if/elif/else/endif)")
    if stack:
        raise TemplateError(f"{where}: the 'if' of line {stack[-1][2]} has no 'endif'")
    if pos < len(text):
        out.append(("text", text[pos:]))
    return root


def _condition(words: list[str], where: str, line: int) -> list[list[tuple[bool, str]]]:
    """``a and not b or c`` as [[(True, a), (False, b)], [(True, c)]]: any group whose terms all hold."""
    if not words:
        raise TemplateError(f"{where}:{line}: a condition is missing")
    groups: list[list[tuple[bool, str]]] = [[]]
    expect_term = True
    positive = True
    for word in words:
        if expect_term and word == "not":
            positive = not positive
        elif expect_term and _NAME.match(word) and word not in _WORDS:
            groups[-1].append((positive, word))
            expect_term, positive = False, True
        elif not expect_term and word in ("and", "or"):
            if word == "or":
                groups.append([])
            expect_term = True
        else:
            raise TemplateError(f"{where}:{line}: condition '{' '.join(words)}' is not flags joined by "
                                "and/or/not")
    if expect_term:
        raise TemplateError(f"{where}:{line}: condition '{' '.join(words)}' ends without a flag")
    return groups


def _names(nodes: list[Node]) -> set[str]:
    found: set[str] = set()
    for node in nodes:
        if node[0] == "if":
            for condition, body in node[1]:
                found |= {name for group in condition or [] for _, name in group} | _names(body)
    return found


def _holds(groups: list[list[tuple[bool, str]]], flags: dict[str, bool]) -> bool:
    return any(all(bool(flags[name]) == positive for positive, name in group) for group in groups)


def _render(nodes: list[Node], flags: dict[str, bool]) -> str:
    parts: list[str] = []
    for node in nodes:
        if node[0] == "text":
            parts.append(node[1])
            continue
        for condition, body in node[1]:
            if condition is None or _holds(condition, flags):
                parts.append(_render(body, flags))
                break
    return "".join(parts)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
