"""The ``$`` and backquote forms of bash words, as :class:`~.lexer.Lexer` reads them: ``$NAME``, ``${...}`` with its
operators and operands, ``$(...)`` (parsed as commands), ``$((...))``, ``$'...'`` (escapes decoded), ``<(...)`` and
backquoted commands. A mixin of the lexer: the position, the text and the nesting are the lexer's."""

from __future__ import annotations

import re

from .errors import BashSyntaxError
from .limits import Depth
from .nodes import DQ, Arith, CmdSub, Lit, Opaque, Param, Part, Word, merged

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL = "@*#?$!-0123456789"
_PARAM_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?", "##", "#", "%%", "%", "//", "/#", "/%", "/", "^^", "^",
              ",,", ",", "@", ":")
_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
            "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class Substitutions:
    text: str
    pos: int
    line: int
    depth: Depth

    def _parse_commands(self) -> None:
        """Parse the commands at the position up to the ``)`` that ends them (the lexer hands this to the parser)."""
        raise NotImplementedError

    def unterminated(self, line: int, closer: str) -> BashSyntaxError:
        raise NotImplementedError

    def _advance(self, to: int) -> None:
        raise NotImplementedError

    def _double_quoted(self) -> DQ:
        raise NotImplementedError

    def sub_word(self, raw: str, line: int, mode: str) -> Word:
        raise NotImplementedError

    def _backquoted(self) -> CmdSub:
        """A backquoted command: read to its end (bash parses it only when it runs)."""
        text, line, start = self.text, self.line, self.pos
        j = start + 1
        while j < len(text) and text[j] != "`":
            j += 2 if text[j] == "\\" else 1
        if j >= len(text):
            raise self.unterminated(line, "`")
        self._advance(j + 1)
        return CmdSub(text[start:j + 1], line)

    def _process_substitution(self) -> Opaque:
        start, line = self.pos, self.line
        self.pos += 1
        self._command_substitution(start)
        raw = self.text[start:self.pos]
        return Opaque(raw, line, f"{raw} is a pipe to a command (only running the script can tell what it holds)")

    def _command_substitution(self, start: int) -> CmdSub:
        """``$(`` at ``self.pos - 1``: its commands parsed up to the matching ``)``."""
        line = self.line
        self.pos += 1
        with self.depth.enter(line):
            self._parse_commands()
        return CmdSub(self.text[start:self.pos], line)

    def _dollar(self, quoted: bool) -> Part:
        text, start, line = self.text, self.pos, self.line
        nxt = text[start + 1:start + 2]
        if nxt == "'" and not quoted:
            return self._ansi_c()
        if nxt == '"' and not quoted:
            self.pos += 1
            return self._double_quoted()
        if text.startswith("$((", start):
            return self._arithmetic()
        if nxt == "(":
            self.pos += 1
            return self._command_substitution(start)
        if nxt == "{":
            return self._braced(quoted)
        if nxt == "[":  # $[expr]: bash's old spelling of $((expr))
            end = self._closing(start + 1, "[", "]", line)
            expr = self.sub_word(text[start + 2:end], line, mode="heredoc")
            self._advance(end + 1)
            return Arith(expr, text[start:end + 1], line)
        m = _NAME.match(text, start + 1)
        if m:
            self.pos = m.end()
            return Param(m.group(), text[start:self.pos], line)
        if nxt and nxt in _SPECIAL:
            self.pos += 2
            return Param(nxt, text[start:self.pos], line)
        self.pos += 1
        return Lit("$", quoted)

    def _ansi_c(self) -> Lit:
        """``$'...'``: backslash escapes decoded as bash does."""
        text, line = self.text, self.line
        j, out = self.pos + 2, []
        while True:
            if j >= len(text):
                raise self.unterminated(line, "'")
            c = text[j]
            if c == "'":
                break
            if c != "\\" or j + 1 >= len(text):
                out.append(c)
                j += 1
                continue
            e = text[j + 1]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                j += 2
            elif e in "01234567":
                m = re.compile(r"[0-7]{1,3}").match(text, j + 1)
                assert m is not None
                out.append(chr(int(m.group(), 8) & 0xFF))
                j = m.end()
            elif e in "xuU" and (m := re.compile(f"[0-9a-fA-F]{{1,{ {'x': 2, 'u': 4, 'U': 8}[e]}}}").match(
                    text, j + 2)):
                code = int(m.group(), 16)
                out.append(chr(code) if code <= 0x10FFFF else "\ufffd")
                j = m.end()
            elif e == "c" and j + 2 < len(text):
                out.append(chr(ord(text[j + 2].upper()) ^ 0x40) if text[j + 2] != "?" else "\x7f")
                j += 3
            else:
                out.append("\\" + e)
                j += 2
        self._advance(j + 1)
        return Lit("".join(out), True)

    def _arithmetic(self) -> Part:
        """``$((expr))``: up to the matching ``))``; ``$(( ... ) ...)`` is a command substitution, as in bash."""
        text, start, line = self.text, self.pos, self.line
        depth, j = 0, start + 3
        while j < len(text):
            c = text[j]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth:
                    depth -= 1
                elif text.startswith("))", j):
                    expr = self.sub_word(text[start + 3:j], line, mode="heredoc")
                    self._advance(j + 2)
                    return Arith(expr, text[start:j + 2], line)
                else:
                    self.pos += 1
                    return self._command_substitution(start)
            elif c in "'\"`":
                end = text.find(c, j + 1)
                j = len(text) if end < 0 else end
            j += 1
        raise self.unterminated(line, ")")

    def _braced(self, quoted: bool) -> Part:
        """``${...}``: the name, an index, the operator and its operands."""
        text, start, line = self.text, self.pos, self.line
        self.pos += 2
        with self.depth.enter(line):
            length = indirect = False
            if text.startswith("#", self.pos) and not text.startswith("}", self.pos + 1):
                length, self.pos = True, self.pos + 1
            elif text.startswith("!", self.pos) and not text.startswith("}", self.pos + 1):
                indirect, self.pos = True, self.pos + 1
            m = _NAME.match(text, self.pos) or re.compile(r"[0-9]+|[@*#?$!-]").match(text, self.pos)
            if not m:
                return self._bad_substitution(start, line, quoted)
            name = m.group()
            self.pos = m.end()
            index = None
            if text.startswith("[", self.pos):
                end = self._closing(self.pos, "[", "]", line)
                index = self.sub_word(text[self.pos + 1:end], line, mode="heredoc")
                self.pos = end + 1
            op = next((o for o in _PARAM_OPS if text.startswith(o, self.pos)), "")
            arg = arg2 = None
            self.pos += len(op)
            if op in ("/", "//", "/#", "/%"):
                arg = self._operand("/}", quoted, line)
                if text.startswith("/", self.pos):
                    self.pos += 1
                    arg2 = self._operand("}", quoted, line)
            elif op == ":":
                arg = self._operand(":}", quoted, line)
                if text.startswith(":", self.pos):
                    self.pos += 1
                    arg2 = self._operand("}", quoted, line)
            elif op:
                arg = self._operand("}", quoted, line)
            if not text.startswith("}", self.pos):
                if self.pos >= len(text):
                    raise self.unterminated(line, "}")
                return self._bad_substitution(start, line, quoted)
            self.pos += 1
        return Param(name, text[start:self.pos], line, index=index, op=op, arg=arg, arg2=arg2, length=length,
                     indirect=indirect)

    def _bad_substitution(self, start: int, line: int, quoted: bool) -> Opaque:
        """bash reads it and fails when the line runs ("bad substitution"): the value is unknown."""
        end = self._closing(start + 1, "{", "}", line)
        self._advance(end + 1)
        raw = self.text[start:end + 1]
        return Opaque(raw, line, f"{raw} is a bad substitution (bash stops at it when the line runs)")

    def _closing(self, i: int, opener: str, closer: str, line: int) -> int:
        """The index of ``closer`` matching the ``opener`` at ``i`` (quotes and nesting skipped)."""
        depth, j, text = 0, i, self.text
        while j < len(text):
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == opener:
                depth += 1
            elif c == closer:
                depth -= 1
                if depth == 0:
                    return j
            elif c in "'\"`":
                end = text.find(c, j + 1)
                if end < 0:
                    break
                j = end
            j += 1
        raise self.unterminated(line, closer)

    def _operand(self, stop: str, quoted: bool, line: int) -> Word:
        """An operand inside ``${...}`` up to an unquoted character of ``stop`` (spaces are part of it)."""
        text, n = self.text, len(self.text)
        start, first = self.pos, self.line
        parts: list[Part] = []
        while True:
            if self.pos >= n:
                raise self.unterminated(line, "}")
            c = text[self.pos]
            if c in stop:
                break
            if c == "\\" and self.pos + 1 < n:
                if text[self.pos + 1] == "\n":
                    self._advance(self.pos + 2)
                else:
                    parts.append(Lit(text[self.pos + 1], True))
                    self._advance(self.pos + 2)
            elif c == "'" and not quoted:
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise self.unterminated(self.line, "'")
                parts.append(Lit(text[self.pos + 1:end], True))
                self._advance(end + 1)
            elif c == '"':
                parts.append(self._double_quoted())
            elif c == "$":
                parts.append(self._dollar(quoted=quoted))
            elif c == "`":
                parts.append(self._backquoted())
            else:
                parts.append(Lit(c, quoted))
                self._advance(self.pos + 1)
        return Word(merged(parts), text[start:self.pos], first)
