"""Bash's integer arithmetic (``$((...))``, ``((...))``, ``let``, array indices): 64-bit wrap-around, C division,
assignments, short-circuit ``&&``/``||``/``?:``. A variable the script leaves unknown makes the result unknown
(:class:`Unknowable`), as does what bash would stop on (division by zero, a syntax error)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .limits import MAX_NESTING, nesting

_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|[0-9]+#[0-9a-zA-Z@_]+|[0-9]+)|([A-Za-z_][A-Za-z0-9_]*)|"
                    r"(\*\*=|<<=|>>=|\+\+|--|\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&^|]=|[-+*/%<>=!~&^|?:,()]))")
_BINARY = {",": 1, "||": 4, "&&": 5, "|": 6, "^": 7, "&": 8, "==": 9, "!=": 9, "<": 10, "<=": 10, ">": 10,
           ">=": 10, "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13, "**": 15}
_ASSIGN = {"=", "*=", "/=", "%=", "+=", "-=", "<<=", ">>=", "&=", "^=", "|=", "**="}
MASK = (1 << 64) - 1


class Unknowable(Exception):
    """Internal: the expression's value cannot be known from the script (the message says why). Control flow of the
    bash reader: every caller turns it into a named unknown value or an undecided condition; it never leaves
    :mod:`mtk.launcher.bash_reader`."""


def wrap(x: int) -> int:
    x &= MASK
    return x - (1 << 64) if x >> 63 else x


def number(text: str) -> int:
    """An integer constant as bash reads it: decimal, 0x hex, 0 octal, base#digits; wrapped to 64 bits digit by
    digit, as bash's own reading does (a 5,000-digit constant is no bignum)."""
    if "#" in text:
        base_text, digits = text.split("#", 1)
        base = _digits(base_text, 10, text) if base_text else 10
        if not 2 <= base <= 64:
            raise Unknowable(f"invalid arithmetic base {base}")
        return _digits(digits if base > 36 else digits.lower(), base, text)
    if text[:2] in ("0x", "0X"):
        return _digits(text[2:].lower(), 16, text)
    if len(text) > 1 and text[0] == "0":
        return _digits(text, 8, text)
    return _digits(text, 10, text)


_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"


def _digits(digits: str, base: int, text: str) -> int:
    value = 0
    for d in digits:
        k = _ALPHABET.find(d)
        if k < 0 or k >= base:
            raise Unknowable(f"value too great for base ({text})")
        value = (value * base + k) & MASK
    return wrap(value)


def evaluate(text: str, lookup: Callable[[str], int], assign: Callable[[str, int], None], line: int) -> int:
    """The value of ``text``; ``lookup`` gives a variable's integer (raising :class:`Unknowable`), ``assign``
    stores one."""
    tokens = _tokens(text)
    if not tokens:
        return 0
    parser = _Parser(tokens, line)
    tree = parser.expression(0)
    if parser.i != len(tokens):
        raise Unknowable(f"syntax error in expression (error token is {''.join(tokens[parser.i:])!r})")
    return _Eval(lookup, assign, line).run(tree, 0)


def _tokens(text: str) -> list[str]:
    out, i = [], 0
    text = text.rstrip()
    while i < len(text):
        m = _TOKEN.match(text, i)
        if not m or m.end() == i:
            raise Unknowable(f"syntax error in expression (error token is {text[i:].strip()!r})")
        out.append(m.group(m.lastindex or 0))
        i = m.end()
    return out


class _Parser:
    """Precedence climbing into tuples: ("num", n), ("var", name), (op, a, b), ("?", c, a, b), ("=", op, name, b)."""

    def __init__(self, tokens: list[str], line: int) -> None:
        self.t, self.i, self.line, self.depth = tokens, 0, line, 0

    def peek(self) -> str:
        return self.t[self.i] if self.i < len(self.t) else ""

    def take(self) -> str:
        tok = self.peek()
        if not tok:
            raise Unknowable("syntax error: operand expected")
        self.i += 1
        return tok

    def expression(self, min_prec: int) -> Any:
        self.depth += 1
        nesting(self.depth, self.line)
        try:
            left = self.unary()
            while True:
                op = self.peek()
                if op in _ASSIGN and min_prec <= 2:
                    if left[0] != "var":
                        raise Unknowable("attempted assignment to non-variable")
                    self.i += 1
                    left = ("=", op, left[1], self.expression(2))
                elif op == "?" and min_prec <= 3:
                    self.i += 1
                    yes = self.expression(1)
                    if self.take() != ":":
                        raise Unknowable("`:' expected for conditional expression")
                    left = ("?", left, yes, self.expression(3))
                elif op in _BINARY and _BINARY[op] >= min_prec:
                    self.i += 1
                    prec = _BINARY[op]
                    left = (op, left, self.expression(prec if op == "**" else prec + 1))
                else:
                    return left
        finally:
            self.depth -= 1

    def unary(self) -> Any:
        tok = self.take()
        if tok in ("-", "+", "!", "~"):
            self.depth += 1
            nesting(self.depth, self.line)
            try:
                return ("u" + tok, self.unary())
            finally:
                self.depth -= 1
        if tok in ("++", "--"):
            name = self.take()
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise Unknowable("syntax error: operand expected")
            return ("pre", tok, name)
        if tok == "(":
            inner = self.expression(0)
            if self.take() != ")":
                raise Unknowable("missing `)'")
            return inner
        if re.fullmatch(r"[A-Za-z_]\w*", tok):
            if self.peek() in ("++", "--"):
                return ("post", self.take(), tok)
            return ("var", tok)
        if re.fullmatch(r"[0-9].*", tok):
            return ("num", number(tok))
        raise Unknowable(f"syntax error: operand expected (error token is {tok!r})")


class _Eval:
    def __init__(self, lookup: Callable[[str], int], assign: Callable[[str, int], None], line: int) -> None:
        self.lookup, self.assign, self.line = lookup, assign, line

    def run(self, node: Any, depth: int) -> int:
        if depth > MAX_NESTING * 4:
            nesting(MAX_NESTING + 1, self.line)
        kind = node[0]
        if kind == "num":
            return int(node[1])
        if kind == "var":
            return self.lookup(node[1])
        if kind in ("pre", "post"):
            old = self.lookup(node[2])
            new = wrap(old + (1 if node[1] == "++" else -1))
            self.assign(node[2], new)
            return new if kind == "pre" else old
        if kind.startswith("u"):
            x = self.run(node[1], depth + 1)
            return {"u-": wrap(-x), "u+": x, "u!": int(x == 0), "u~": wrap(~x)}[kind]
        if kind == "?":
            return self.run(node[2] if self.run(node[1], depth + 1) else node[3], depth + 1)
        if kind == "=":
            _, op, name, rhs = node
            value = self.run(rhs, depth + 1)
            if op != "=":
                value = _binary(op[:-1], self.lookup(name), value)
            self.assign(name, value)
            return value
        if kind == "&&":
            return int(bool(self.run(node[1], depth + 1)) and bool(self.run(node[2], depth + 1)))
        if kind == "||":
            return int(bool(self.run(node[1], depth + 1)) or bool(self.run(node[2], depth + 1)))
        if kind == ",":
            self.run(node[1], depth + 1)
            return self.run(node[2], depth + 1)
        return _binary(kind, self.run(node[1], depth + 1), self.run(node[2], depth + 1))


def _binary(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise Unknowable("division by 0 (bash stops the command)")
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return wrap(q if op == "/" else a - q * b)
    if op == "**":
        if b < 0:
            raise Unknowable("exponent less than 0")
        return wrap(pow(a, b, 1 << 64))
    if op in ("<<", ">>"):
        b &= 63
        return wrap(a << b) if op == "<<" else a >> b
    table = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b, "==": int(a == b),
             "!=": int(a != b), "<": int(a < b), "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b)}
    return wrap(table[op])
