"""``[[ ... ]]``, ``[ ... ]`` and ``test``, decided where the script decides them: string and number comparisons,
``-z``/``-n``/``-v``, patterns, ``!``/``&&``/``||``/``-a``/``-o`` and parentheses. A file test, a regex or an operand
the script leaves unknown cannot be decided: None, and the reader follows both ways."""

from __future__ import annotations

import re
from collections.abc import Callable

from . import arith, patterns
from .nodes import Word
from .values import Value

BINARY = frozenset(["==", "=", "!=", "<", ">", "=~", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef"])
NUMERIC = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
           "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


def _and(a: bool | None, b: Callable[[], bool | None]) -> bool | None:
    right = b()  # read even when the left side decides: the reader has to get past it
    if a is False or right is False:
        return False
    return None if a is None or right is None else True


def _or(a: bool | None, b: Callable[[], bool | None]) -> bool | None:
    right = b()
    if a is True or right is True:
        return True
    return None if a is None or right is None else False


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


class Conditions:
    """Decides conditions with the reader's expander; ``is_set`` answers ``-v NAME``."""

    def __init__(self, scalar: Callable[[Word], Value], pattern: Callable[[Word], list[tuple[str, bool]] | Value],
                 integer: Callable[[str, int], int | None], is_set: Callable[[str], bool | None]) -> None:
        self.scalar, self.pattern, self.integer, self.is_set = scalar, pattern, integer, is_set

    # ---------------------------------------------------------------------------------------------------- [[ ]]

    def double(self, items: tuple[Word | str, ...], line: int) -> bool | None:
        self.items, self.i, self.line = list(items), 0, line
        try:
            result = self._or_expr()
        except (IndexError, ValueError):
            return None
        return result if self.i == len(self.items) else None

    def _tok(self) -> str | None:
        item = self.items[self.i] if self.i < len(self.items) else None
        if item is None:
            return None
        return item if isinstance(item, str) else item.plain

    def _or_expr(self) -> bool | None:
        left = self._and_expr()
        while self._tok() == "||":
            self.i += 1
            left = _or(left, self._and_expr)
        return left

    def _and_expr(self) -> bool | None:
        left = self._not_expr()
        while self._tok() == "&&":
            self.i += 1
            left = _and(left, self._not_expr)
        return left

    def _not_expr(self) -> bool | None:
        if self._tok() == "!":
            self.i += 1
            return _not(self._not_expr())
        if self._tok() == "(":
            self.i += 1
            inner = self._or_expr()
            if self._tok() != ")":
                raise ValueError("unbalanced")
            self.i += 1
            return inner
        return self._primary()

    def _primary(self) -> bool | None:
        first = self.items[self.i]
        op = self._tok()
        nxt = self.items[self.i + 1] if self.i + 1 < len(self.items) else None
        after = self.items[self.i + 2] if self.i + 2 < len(self.items) else None
        middle = nxt if isinstance(nxt, str) else (nxt.plain if nxt is not None else None)
        if middle in BINARY and after is not None and not isinstance(after, str):
            self.i += 3
            if isinstance(first, str):
                raise ValueError("operand expected")
            return self._binary(first, middle, after, double=True)
        if op is not None and re.fullmatch(r"-[a-zA-Z]", op) and nxt is not None and not isinstance(nxt, str):
            self.i += 2
            return self._unary(op, self.scalar(nxt))
        self.i += 1
        if isinstance(first, str):
            raise ValueError("operand expected")
        value = self.scalar(first)
        return value.text != "" if value.known else (True if _nonempty(value) else None)

    def _binary(self, left: Word, op: str, right: Word, double: bool) -> bool | None:
        a = self.scalar(left)
        if op in ("==", "=", "!=") and double:
            pat = self.pattern(right)
            if isinstance(pat, Value) or not a.known:
                return None
            same = patterns.matches(pat, a.text)
            return same if op != "!=" or same is None else not same
        b = self.scalar(right)
        return compare(a, op, b, self.integer if double else None, self.line)

    def _unary(self, op: str, value: Value) -> bool | None:
        return unary(op, value, self.is_set)

    # ------------------------------------------------------------------------------------------------- [ ], test

    def single(self, args: list[Value], line: int) -> bool | None:
        """``test``'s own reading of its arguments (by count, as POSIX says, then -a/-o left to right)."""
        if any(a.splits for a in args):
            return None  # an unquoted unknown: even the number of arguments is not known
        try:
            return self._test(args, line)
        except (IndexError, ValueError):
            return None

    def _test(self, args: list[Value], line: int) -> bool | None:
        texts = [a.text if a.known else None for a in args]
        n = len(args)
        if n == 0:
            return False
        if n == 1:
            return args[0].text != "" if args[0].known else (True if _nonempty(args[0]) else None)
        if texts[0] == "!" and n <= 4:
            return _not(self._test(args[1:], line))
        if n == 2:
            if texts[0] is None:
                return None
            return unary(texts[0], args[1], self.is_set)
        if n == 3 and texts[1] in BINARY - {"=~"}:
            return compare(args[0], texts[1], args[2], None, line)
        if n == 3 and texts[0] == "(" and texts[2] == ")":
            return self._test(args[1:2], line)
        for k, t in enumerate(texts):  # -o binds looser than -a
            if t == "-o" and 0 < k < n - 1:
                return _or(self._test(args[:k], line), lambda k=k: self._test(args[k + 1:], line))  # type: ignore
        for k, t in enumerate(texts):
            if t == "-a" and 0 < k < n - 1:
                return _and(self._test(args[:k], line), lambda k=k: self._test(args[k + 1:], line))  # type: ignore
        return None


def _nonempty(value: Value) -> bool:
    return any(c.text and not c.why for c in value.chunks)


def unary(op: str, value: Value, is_set: Callable[[str], bool | None]) -> bool | None:
    if op in ("-z", "-n"):
        if not value.known:
            return (op == "-n") if _nonempty(value) else None
        return (value.text == "") == (op == "-z")
    if op == "-v":
        return is_set(value.text) if value.known else None
    return None  # a file test: only the machine that runs the script can tell


def compare(a: Value, op: str, b: Value, integer: Callable[[str, int], int | None] | None,
            line: int) -> bool | None:
    if not (a.known and b.known):
        return None
    if op in ("=", "=="):
        return a.text == b.text
    if op == "!=":
        return a.text != b.text
    if op in ("<", ">"):
        return a.text < b.text if op == "<" else a.text > b.text
    if op in NUMERIC:
        x = integer(a.text, line) if integer else _int(a.text)
        y = integer(b.text, line) if integer else _int(b.text)
        if x is None or y is None:
            return None
        return NUMERIC[op](x, y)
    return None


def _int(text: str) -> int | None:
    text = text.strip()
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    return None


def arithmetic_integer(evaluate: Callable[[str], int]) -> Callable[[str, int], int | None]:
    """In ``[[ ]]`` the operands of -eq and the like are arithmetic expressions."""
    def integer(text: str, line: int) -> int | None:
        try:
            return evaluate(text)
        except arith.Unknowable:
            return None
    return integer
