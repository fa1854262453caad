"""Bash's tokens, read as bash reads them: words with their quoting and expansions, operators, newlines, comments,
line continuations and here-documents. A ``$(...)`` is parsed as commands (as ``bash -n`` does); a backquoted
command, like bash, only has to end. An unterminated quote or substitution is refused with bash's own wording and
line. Nothing is expanded here: a word keeps its parts (:mod:`.nodes`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import BashSyntaxError
from .limits import nesting
from .nodes import DQ, Arith, Assign, CmdSub, Heredoc, Lit, Opaque, Param, Part, Word

META = frozenset(" \t\n;&|()<>")
OPERATORS = (";;&", ";;", ";&", ";", "&&", "&>>", "&>", "&", "||", "|&", "|", "(", ")", "<<<", "<<-", "<<", "<&",
             "<>", "<", ">>", ">&", ">|", ">")
_PLAIN = re.compile(r"[^\s;&|()<>'\"\\$`]+")
_IN_DQ = re.compile(r"[^\"\\$`]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=$")
_SPECIAL = "@*#?$!-0123456789"
_PARAM_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?", "##", "#", "%%", "%", "//", "/#", "/%", "/", "^^", "^",
              ",,", ",", "@", ":")
_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "?": "?"}


@dataclass
class Token:
    kind: str  # WORD, OP, NEWLINE, EOF, IONUM, ARRAY
    text: str
    line: int
    start: int
    end: int
    word: Word | None = None
    assign: Assign | None = None


class Depth:
    """How deep the reader is in blocks, substitutions and quotes, shared by every lexer and parser of one read."""

    def __init__(self) -> None:
        self.value = 0

    @contextmanager
    def enter(self, line: int) -> Iterator[None]:
        self.value += 1
        nesting(self.value, line)
        try:
            yield
        finally:
            self.value -= 1


def eof_line(text: str) -> int:
    """The line bash names for "unexpected end of file": one past the last line."""
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1) + 1


class Lexer:
    """Tokens of ``text`` on demand. ``comsub`` parses the commands of a ``$(`` at the lexer's position (the
    parser's, given here so that the two modules do not import each other)."""

    def __init__(self, text: str, comsub: Callable[[Lexer], None], depth: Depth, line: int = 1) -> None:
        self.text, self.pos, self.line, self.first_line = text, 0, line, line
        self.comsub, self.depth = comsub, depth
        self.pending: list[Heredoc] = []
        self.heredocs: list[Heredoc] = []
        self.peeked: Token | None = None

    # ------------------------------------------------------------------------------------------------ tokens

    def peek(self) -> Token:
        if self.peeked is None:
            self.peeked = self._scan()
        return self.peeked

    def next(self) -> Token:
        tok = self.peek()
        self.peeked = None
        return tok

    def at(self, pos: int) -> None:
        """Go on reading from ``pos`` (a token the parser reads itself, like ``((...))``)."""
        self.line += self.text.count("\n", self.pos, pos)
        self.pos, self.peeked = pos, None

    def error(self, line: int, what: str) -> BashSyntaxError:
        return BashSyntaxError(line, what)

    def unterminated(self, line: int, closer: str) -> BashSyntaxError:
        return BashSyntaxError(line, f"unexpected EOF while looking for matching `{closer}'")

    def _advance(self, to: int) -> None:
        self.line += self.text.count("\n", self.pos, to)
        self.pos = to

    def _skip_blanks(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t":
                self.pos += 1
            elif c == "\\" and text.startswith("\\\n", self.pos):
                self.pos += 2
                self.line += 1
            elif c == "#":
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            else:
                return

    def _scan(self) -> Token:
        self._skip_blanks()
        text, start, line = self.text, self.pos, self.line
        if start >= len(text):
            return Token("EOF", "", self.first_line - 1 + eof_line(text), start, start)
        c = text[start]
        if c == "\n":
            self.pos += 1
            self.line += 1
            self._read_heredocs()
            return Token("NEWLINE", "\n", line, start, self.pos)
        if c in "<>" and text.startswith("(", start + 1):
            return self._word_token()
        if c in ";&|()<>":
            op = next(o for o in OPERATORS if text.startswith(o, start))
            self.pos += len(op)
            return Token("OP", op, line, start, self.pos)
        if c.isdigit():
            m = re.match(r"\d+(?=[<>])", text[start:start + 12])
            if m:
                self.pos += m.end()
                return Token("IONUM", m.group(), line, start, self.pos)
        return self._word_token()

    def _word_token(self) -> Token:
        start, line = self.pos, self.line
        word, assign = self.read_word()
        if assign is not None:
            return Token("ARRAY", self.text[start:self.pos], line, start, self.pos, assign=assign)
        return Token("WORD", word.raw, line, start, self.pos, word=word)

    # ------------------------------------------------------------------------------------------------- words

    def read_word(self) -> tuple[Word, Assign | None]:
        """The word at the position (up to an unquoted metacharacter); an array assignment ``NAME=(...)`` gives
        its :class:`Assign` instead."""
        text, n = self.text, len(self.text)
        start, line = self.pos, self.line
        parts: list[Part] = []
        while self.pos < n:
            c = text[self.pos]
            if c in META:
                if c in "<>" and self.pos == start and text.startswith("(", self.pos + 1):
                    parts.append(self._process_substitution())
                    continue
                if c == "(" and len(parts) == 1 and isinstance(parts[0], Lit) and not parts[0].quoted:
                    head = _ASSIGN_HEAD.match(parts[0].text)
                    if head:
                        return Word(tuple(parts), text[start:self.pos], line), self._array(head, line)
                break
            if c == "\\":
                if text.startswith("\\\n", self.pos):
                    self._advance(self.pos + 2)
                elif self.pos + 1 < n:
                    parts.append(Lit(text[self.pos + 1], True))
                    self._advance(self.pos + 2)
                else:
                    parts.append(Lit("\\"))
                    self.pos += 1
            elif c == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise self.unterminated(self.line, "'")
                parts.append(Lit(text[self.pos + 1:end], True))
                self._advance(end + 1)
            elif c == '"':
                parts.append(self._double_quoted())
            elif c == "$":
                parts.append(self._dollar(quoted=False))
            elif c == "`":
                parts.append(self._backquoted())
            elif c == "~" and (self.pos == start or (text[self.pos - 1] in "=:" and _is_assignment(parts))):
                m = re.compile(r"~[A-Za-z0-9_.+-]*").match(text, self.pos)
                assert m is not None
                parts.append(Opaque(m.group(), line, f"{m.group()} is a home directory (set where the script runs)"))
                self.pos = m.end()
            else:
                m = _PLAIN.match(text, self.pos)
                chunk = m.group() if m else c
                parts.append(Lit(chunk))
                self._advance(self.pos + len(chunk))
        return Word(_merged(parts), text[start:self.pos], line), None

    def _array(self, head: re.Match, line: int) -> Assign:
        """``NAME=( elements )``: words over lines, comments between them."""
        self.pos += 1
        elements: list[Word] = []
        with self.depth.enter(line):
            while True:
                self._skip_blanks()
                if self.pos >= len(self.text):
                    raise self.unterminated(line, ")")
                c = self.text[self.pos]
                if c == "\n":
                    self._advance(self.pos + 1)
                    continue
                if c == ")":
                    self.pos += 1
                    break
                if c in META:
                    tok = self._scan()
                    raise self.error(tok.line, f"syntax error near unexpected token `{tok.text}'")
                word, nested = self.read_word()
                if nested is not None:
                    raise self.error(word.line, "syntax error near unexpected token `('")
                elements.append(word)
        index = self._index_word(head.group(2)[1:-1], line) if head.group(2) else None
        return Assign(head.group(1), line, append=bool(head.group(3)), index=index, array=tuple(elements))

    def _index_word(self, raw: str, line: int) -> Word:
        return self.sub_word(raw, line, mode="heredoc")

    def _double_quoted(self) -> DQ:
        text, n = self.text, len(self.text)
        line = self.line
        self.pos += 1
        parts: list[Part] = []
        with self.depth.enter(line):
            while True:
                if self.pos >= n:
                    raise self.unterminated(line, '"')
                c = text[self.pos]
                if c == '"':
                    self.pos += 1
                    return DQ(_merged(parts))
                if c == "\\":
                    nxt = text[self.pos + 1:self.pos + 2]
                    if nxt == "\n":
                        self._advance(self.pos + 2)
                    elif nxt in ("$", "`", '"', "\\"):
                        parts.append(Lit(nxt, True))
                        self.pos += 2
                    else:
                        parts.append(Lit("\\", True))
                        self.pos += 1
                elif c == "$":
                    parts.append(self._dollar(quoted=True))
                elif c == "`":
                    parts.append(self._backquoted())
                else:
                    m = _IN_DQ.match(text, self.pos)
                    assert m is not None
                    parts.append(Lit(m.group(), True))
                    self._advance(m.end())

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
            self.comsub(self)
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
        return Word(_merged(parts), text[start:self.pos], first)

    def sub_word(self, raw: str, line: int, mode: str) -> Word:
        """``raw`` read as one word in ``mode`` ``heredoc`` (a here-document body, an arithmetic expression, an
        index: ``$`` expansions and backslashes, quotes are plain characters)."""
        sub = Lexer(raw, self.comsub, self.depth, line)
        parts: list[Part] = []
        n = len(raw)
        while sub.pos < n:
            c = raw[sub.pos]
            if c == "\\" and sub.pos + 1 < n and raw[sub.pos + 1] in "$`\\\n":
                if raw[sub.pos + 1] == "\n":
                    sub._advance(sub.pos + 2)
                else:
                    parts.append(Lit(raw[sub.pos + 1], True))
                    sub.pos += 2
            elif c == "$":
                parts.append(sub._dollar(quoted=True))
            elif c == "`":
                parts.append(sub._backquoted())
            else:
                m = re.compile(r"[^\\$`]+").match(raw, sub.pos)
                chunk = m.group() if m else c
                parts.append(Lit(chunk, True))
                sub._advance(sub.pos + len(chunk))
        return Word(_merged(parts), raw, line)

    # ------------------------------------------------------------------------------------------- here-documents

    def add_heredoc(self, heredoc: Heredoc) -> None:
        self.pending.append(heredoc)
        self.heredocs.append(heredoc)

    def _read_heredocs(self) -> None:
        """The bodies of the here-documents started on the line just ended, each up to its delimiter line (or the
        end of the file, which bash only warns about)."""
        text = self.text
        for doc in self.pending:
            doc.body_line = self.line
            lines: list[str] = []
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                end = len(text) if end < 0 else end
                row = text[self.pos:end]
                self._advance(min(end + 1, len(text)))
                if doc.strip_tabs:
                    row = row.lstrip("\t")
                if row == doc.delimiter:
                    break
                lines.append(row + "\n")
            doc.body = "".join(lines)
        self.pending = []


def _is_assignment(parts: list[Part]) -> bool:
    return len(parts) == 1 and isinstance(parts[0], Lit) and not parts[0].quoted and \
        bool(re.match(r"[A-Za-z_][A-Za-z0-9_]*\+?=", parts[0].text))


def _merged(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent literal parts of the same quoting joined (one part per run, not per character)."""
    out: list[Part] = []
    for part in parts:
        last = out[-1] if out else None
        if isinstance(part, Lit) and isinstance(last, Lit) and last.quoted == part.quoted:
            out[-1] = Lit(last.text + part.text, part.quoted)
        else:
            out.append(part)
    return tuple(out)
