"""Bash's tokens, read as bash reads them: words with their quoting and expansions, operators, newlines, comments,
line continuations and here-documents. A ``$(...)`` is parsed as commands (as ``bash -n`` does); a backquoted
command, like bash, only has to end. An unterminated quote or substitution is refused with bash's own wording and
line. Nothing is expanded here: a word keeps its parts (:mod:`.nodes`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .errors import BashSyntaxError
from .limits import Depth
from .nodes import DQ, Assign, Heredoc, Lit, Opaque, Part, Word, merged
from .substitutions import Substitutions

META = frozenset(" \t\n;&|()<>")
OPERATORS = (";;&", ";;", ";&", ";", "&&", "&>>", "&>", "&", "||", "|&", "|", "(", ")", "<<<", "<<-", "<<", "<&",
             "<>", "<", ">>", ">&", ">|", ">")
_PLAIN = re.compile(r"[^\s;&|()<>'\"\\$`]+")
_IN_DQ = re.compile(r"[^\"\\$`]+")
_ASSIGN_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=$")


@dataclass
class Token:
    kind: str  # WORD, OP, NEWLINE, EOF, IONUM, ARRAY
    text: str
    line: int
    start: int
    end: int
    word: Word | None = None
    assign: Assign | None = None


def eof_line(text: str) -> int:
    """The line bash names for "unexpected end of file": one past the last line."""
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1) + 1


class Lexer(Substitutions):
    """Tokens of ``text`` on demand. ``comsub`` parses the commands of a ``$(`` at the lexer's position (the
    parser's, given here so that the two modules do not import each other)."""

    def __init__(self, text: str, comsub: Callable[[Lexer], None], depth: Depth, line: int = 1) -> None:
        self.text, self.pos, self.line, self.first_line = text, 0, line, line
        self.comsub, self.depth = comsub, depth
        self.pending: list[Heredoc] = []
        self.heredocs: list[Heredoc] = []
        self.peeked: Token | None = None

    def _parse_commands(self) -> None:
        self.comsub(self)

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
        return Word(merged(parts), text[start:self.pos], line), None

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
                    return DQ(merged(parts))
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
        return Word(merged(parts), raw, line)

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
