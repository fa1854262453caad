"""Bash's grammar over :mod:`.lexer`'s tokens: lists, ``&&``/``||``, pipelines, simple commands with assignments
and redirections, ``if``/``while``/``until``/``for``/``select``/``case``, ``{ }``, ``( )``, ``[[ ]]``, ``(( ))`` and
functions. What ``bash -n`` refuses is refused here with its message and line (a test holds the two together)."""

from __future__ import annotations

import re

from .errors import BashSyntaxError
from .lexer import Lexer, Token
from .limits import Depth
from .nodes import (
    AndOr,
    ArithCmd,
    ArithFor,
    Assign,
    Case,
    Cond,
    For,
    FunctionDef,
    Group,
    Heredoc,
    If,
    Lit,
    Loop,
    Node,
    Pipeline,
    Program,
    Redir,
    Redirected,
    Seq,
    Simple,
    Word,
)

ENDS = frozenset({"then", "else", "elif", "fi", "do", "done", "esac", "}"})
REDIRECTIONS = frozenset({"<", ">", ">>", "<&", ">&", "<>", ">|", "&>", "&>>", "<<<", "<<", "<<-"})
DECLARATIONS = frozenset({"declare", "typeset", "local", "export", "readonly"})
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[")


def parse(text: str, depth: Depth | None = None, line: int = 1) -> Program:
    """The whole script, or the first syntax error as ``bash -n`` reports it."""
    lexer = Lexer(text, _command_substitution, depth or Depth(), line)
    parser = Parser(lexer)
    body = parser.seq(frozenset())
    tok = lexer.peek()
    if tok.kind != "EOF":
        raise parser.unexpected(tok)
    return Program(body, lexer.heredocs)


def _command_substitution(lexer: Lexer) -> None:
    """The commands of a ``$(`` up to its ``)`` (bash parses them with the script)."""
    parser = Parser(lexer)
    try:
        parser.seq(frozenset({")"}))
    except BashSyntaxError as exc:
        if exc.what != "syntax error: unexpected end of file":
            raise
        raise lexer.unterminated(exc.line or lexer.line, ")") from None
    tok = lexer.next()
    if tok.kind == "EOF":
        raise lexer.unterminated(tok.line, ")")
    if tok.text != ")":
        raise parser.unexpected(tok)


class Parser:
    def __init__(self, lexer: Lexer) -> None:
        self.lx = lexer

    # ------------------------------------------------------------------------------------------------- helpers

    def unexpected(self, tok: Token) -> BashSyntaxError:
        if tok.kind == "EOF":
            return BashSyntaxError(tok.line, "syntax error: unexpected end of file")
        name = "newline" if tok.kind == "NEWLINE" else tok.text.replace("\\\n", "").replace("\n", "\\n")
        return BashSyntaxError(tok.line, f"syntax error near unexpected token `{name}'")  # one line, always

    def _reserved(self, tok: Token) -> str | None:
        return tok.word.plain if tok.kind == "WORD" and tok.word is not None else None

    def _expect(self, word: str) -> Token:
        tok = self.lx.next()
        if self._reserved(tok) != word:
            raise self.unexpected(tok)
        return tok

    def _expect_op(self, op: str) -> Token:
        tok = self.lx.next()
        if tok.kind != "OP" or tok.text != op:
            raise self.unexpected(tok)
        return tok

    def _newlines(self) -> None:
        while self.lx.peek().kind == "NEWLINE":
            self.lx.next()

    def _closes(self, tok: Token, closers: frozenset[str]) -> bool:
        if tok.kind == "OP":
            return tok.text in closers
        return self._reserved(tok) in closers

    def _filled(self, body: Seq) -> Seq:
        """A block must hold a command: ``if x; then fi`` is an error at ``fi``."""
        if not body.items:
            raise self.unexpected(self.lx.peek())
        return body

    # ----------------------------------------------------------------------------------------------- lists

    def seq(self, closers: frozenset[str]) -> Seq:
        items: list[tuple[Node, bool]] = []
        self._newlines()
        line = self.lx.peek().line
        while True:
            tok = self.lx.peek()
            if tok.kind == "EOF" or self._closes(tok, closers):
                return Seq(tuple(items), line)
            node = self.and_or()
            tok = self.lx.peek()
            if tok.kind == "OP" and tok.text in (";", "&"):
                self.lx.next()
                items.append((node, tok.text == "&"))
            elif tok.kind == "NEWLINE" or tok.kind == "EOF" or self._closes(tok, closers):
                items.append((node, False))
            else:
                raise self.unexpected(tok)
            self._newlines()

    def and_or(self) -> Node:
        line = self.lx.peek().line
        first = self.pipeline()
        rest: list[tuple[str, Node]] = []
        while (tok := self.lx.peek()).kind == "OP" and tok.text in ("&&", "||"):
            self.lx.next()
            self._newlines()
            rest.append((tok.text, self.pipeline()))
        return AndOr(first, tuple(rest), line) if rest else first

    def pipeline(self) -> Node:
        line = self.lx.peek().line
        negate = False
        while True:
            word = self._reserved(self.lx.peek())
            if word == "time":
                self.lx.next()
                if self._reserved(self.lx.peek()) == "-p":
                    self.lx.next()
            elif word == "!":
                self.lx.next()
                negate = not negate
            else:
                break
        commands = [self.command()]
        while (tok := self.lx.peek()).kind == "OP" and tok.text in ("|", "|&"):
            self.lx.next()
            self._newlines()
            commands.append(self.command())
        return Pipeline(tuple(commands), negate, line) if negate or len(commands) > 1 else commands[0]

    # -------------------------------------------------------------------------------------------- commands

    def command(self) -> Node:
        tok = self.lx.peek()
        word = self._reserved(tok)
        compound: Node | None = None
        if tok.kind == "WORD":
            if word in ENDS:
                raise self.unexpected(tok)
            with self.lx.depth.enter(tok.line):
                compound = self._compound(word, tok)
        elif tok.kind == "OP" and tok.text == "(":
            with self.lx.depth.enter(tok.line):
                compound = self._arith_command(tok) if self.lx.text.startswith("(", tok.end) else self._subshell()
        elif tok.kind not in ("IONUM", "ARRAY") and not (tok.kind == "OP" and tok.text in REDIRECTIONS):
            raise self.unexpected(tok)
        if compound is None:
            return self.simple()
        redirs = []
        while self._at_redirection():
            redirs.append(self.redirection())
        return Redirected(compound, tuple(redirs), tok.line) if redirs else compound

    def _compound(self, word: str | None, tok: Token) -> Node | None:
        if word == "if":
            return self._if()
        if word in ("while", "until"):
            self.lx.next()
            cond = self._filled(self.seq(frozenset({"do"})))
            self._expect("do")
            body = self._filled(self.seq(frozenset({"done"})))
            self._expect("done")
            return Loop(word == "until", cond, body, tok.line)
        if word in ("for", "select"):
            return self._for(word == "select")
        if word == "case":
            return self._case()
        if word == "{":
            self.lx.next()
            body = self._filled(self.seq(frozenset({"}"})))
            self._expect("}")
            return Group(body, False, tok.line)
        if word == "[[":
            return self._cond()
        if word == "function":
            self.lx.next()
            name = self.lx.next()
            if name.kind != "WORD":
                raise self.unexpected(name)
            if self.lx.peek().text == "(":
                self.lx.next()
                self._expect_op(")")
            return self._function_body(name.text, tok.line)
        return None

    def _function_body(self, name: str, line: int) -> FunctionDef:
        self._newlines()
        tok = self.lx.peek()
        opens = self._reserved(tok) in ("{", "if", "while", "until", "for", "select", "case", "[[") or \
            (tok.kind == "OP" and tok.text == "(")
        if not opens:
            raise self.unexpected(tok)
        return FunctionDef(name, self.command(), line)

    def _if(self) -> If:
        line = self.lx.next().line
        clauses = []
        while True:
            cond = self._filled(self.seq(frozenset({"then"})))
            self._expect("then")
            body = self._filled(self.seq(frozenset({"elif", "else", "fi"})))
            clauses.append((cond, body))
            if self._reserved(self.lx.peek()) != "elif":
                break
            self.lx.next()
        orelse = None
        if self._reserved(self.lx.peek()) == "else":
            self.lx.next()
            orelse = self._filled(self.seq(frozenset({"fi"})))
        self._expect("fi")
        return If(tuple(clauses), orelse, line)

    def _for(self, select: bool) -> Node:
        line = self.lx.next().line
        tok = self.lx.peek()
        if not select and tok.kind == "OP" and tok.text == "(" and self.lx.text.startswith("(", tok.end):
            raw = self._double_parens(tok)
            self._loop_separator()
            return ArithFor(raw, self._do_body(), line)
        name = self.lx.next()
        if name.kind != "WORD":  # a name that is not one fails when the loop runs, not before
            raise self.unexpected(name)
        self._newlines()
        words: tuple[Word, ...] | None = None
        if self._reserved(self.lx.peek()) == "in":
            self.lx.next()
            found = []
            while (tok := self.lx.peek()).kind == "WORD":
                found.append(self.lx.next().word)
            words = tuple(w for w in found if w is not None)
            if (tok.kind == "OP" and tok.text == ";") or tok.kind == "NEWLINE":
                self.lx.next()
            else:
                raise self.unexpected(tok)
        else:
            self._loop_separator()
        return For(name.text, words, self._do_body(), line, select)

    def _loop_separator(self) -> None:
        tok = self.lx.peek()
        if tok.kind == "OP" and tok.text == ";":
            self.lx.next()
        self._newlines()

    def _do_body(self) -> Seq:
        self._newlines()
        if self._reserved(self.lx.peek()) == "{":
            tok = self.lx.next()
            body = self._filled(self.seq(frozenset({"}"})))
            self._expect("}")
            return Seq(((Group(body, False, tok.line), False),), tok.line)
        self._expect("do")
        body = self._filled(self.seq(frozenset({"done"})))
        self._expect("done")
        return body

    def _case(self) -> Case:
        line = self.lx.next().line
        subject = self.lx.next()
        if subject.kind != "WORD" or subject.word is None:
            raise self.unexpected(subject)
        self._newlines()
        self._expect("in")
        clauses: list[tuple[tuple[Word, ...], Seq, str]] = []
        while True:
            self._newlines()
            tok = self.lx.peek()
            if self._reserved(tok) == "esac":
                self.lx.next()
                return Case(subject.word, tuple(clauses), line)
            if tok.kind == "OP" and tok.text == "(":
                self.lx.next()
            patterns = [self._pattern()]
            while (tok := self.lx.peek()).kind == "OP" and tok.text == "|":
                self.lx.next()
                patterns.append(self._pattern())
            self._expect_op(")")
            body = self.seq(frozenset({"esac", ";;", ";&", ";;&"}))
            tok = self.lx.peek()
            end = ";;"
            if tok.kind == "OP" and tok.text in (";;", ";&", ";;&"):
                end = self.lx.next().text
            elif self._reserved(tok) != "esac":
                raise self.unexpected(tok)
            clauses.append((tuple(patterns), body, end))

    def _pattern(self) -> Word:
        tok = self.lx.next()
        if tok.kind != "WORD" or tok.word is None:
            raise self.unexpected(tok)
        return tok.word

    def _cond(self) -> Cond:
        line = self.lx.next().line
        items: list[Word | str] = []
        while True:
            tok = self.lx.next()
            if self._reserved(tok) == "]]":
                if not items:
                    raise self.unexpected(tok)
                return Cond(tuple(items), line)
            if tok.kind == "NEWLINE":
                continue
            if tok.kind == "EOF":
                raise self.unexpected(tok)
            if tok.kind == "WORD" and tok.word is not None:
                items.append(tok.word)
            else:
                items.append(tok.text)

    def _subshell(self) -> Group:
        line = self.lx.next().line
        body = self._filled(self.seq(frozenset({")"})))
        self._expect_op(")")
        return Group(body, True, line)

    def _arith_command(self, tok: Token) -> ArithCmd:
        raw = self._double_parens(tok)
        return ArithCmd(self.lx.sub_word(raw, tok.line, mode="heredoc"), tok.line)

    def _double_parens(self, tok: Token) -> str:
        """The text of ``(( ... ))`` starting at ``tok``; the lexer goes on after it."""
        text, depth, j = self.lx.text, 0, tok.end + 1
        while j < len(text):
            c = text[j]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0 and text.startswith("))", j):
                    self.lx.at(j + 2)
                    return text[tok.end + 1:j]
                depth = max(depth - 1, 0)
            j += 1
        raise self.lx.unterminated(tok.line, ")")

    # ------------------------------------------------------------------------------------------ simple commands

    def simple(self) -> Node:
        line = self.lx.peek().line
        assigns: list[Assign] = []
        words: list[Word | Assign] = []
        redirs: list[Redir] = []
        while True:
            tok = self.lx.peek()
            if tok.kind == "ARRAY" and tok.assign is not None:
                self.lx.next()
                (words if words else assigns).append(tok.assign)
            elif tok.kind == "WORD" and tok.word is not None:
                self.lx.next()
                declared = bool(words) and isinstance(words[0], Word) and words[0].plain in DECLARATIONS
                assign = self.assignment(tok.word) if not words or declared else None
                if assign is not None:
                    (words if words else assigns).append(assign)
                    continue
                words.append(tok.word)
                if len(words) == 1 and not assigns and self.lx.peek().text == "(" and \
                        self.lx.peek().kind == "OP":
                    self.lx.next()
                    self._expect_op(")")
                    return self._function_body(tok.word.raw, line)
            elif self._at_redirection():
                redirs.append(self.redirection())
            else:
                break
        if not (assigns or words or redirs):
            raise self.unexpected(self.lx.peek())
        return Simple(tuple(assigns), tuple(words), tuple(redirs), line)

    def assignment(self, word: Word) -> Assign | None:
        """``NAME=value`` / ``NAME+=value`` / ``NAME[i]=value`` when the word is one (its head unquoted)."""
        head = word.parts[0] if word.parts else None
        if not isinstance(head, Lit) or head.quoted:
            return None
        m = _ASSIGNMENT.match(head.text)
        if m:
            rest = (Lit(head.text[m.end():]),) if head.text[m.end():] else ()
            value = Word((*rest, *word.parts[1:]), word.raw[m.end():], word.line)
            return Assign(m.group(1), word.line, value=value, append=bool(m.group(2)))
        m = _INDEXED.match(head.text)
        close = re.search(r"\](\+?)=", word.raw)
        if m and close and word.raw.startswith(m.group(0)):
            index = self.lx.sub_word(word.raw[m.end():close.start()], word.line, mode="heredoc")
            value = self.lx.sub_word(word.raw[close.end():], word.line, mode="heredoc")
            return Assign(m.group(1), word.line, value=value, append=bool(close.group(1)), index=index)
        return None

    def _at_redirection(self) -> bool:
        tok = self.lx.peek()
        return tok.kind == "IONUM" or (tok.kind == "OP" and tok.text in REDIRECTIONS)

    def redirection(self) -> Redir:
        fd = ""
        if self.lx.peek().kind == "IONUM":
            fd = self.lx.next().text
        op = self.lx.next()
        target = self.lx.next()
        if target.kind != "WORD" or target.word is None:
            raise self.unexpected(target)
        heredoc = None
        if op.text in ("<<", "<<-"):
            raw = target.word.raw
            quoted = any(c in raw for c in "'\"\\")
            heredoc = Heredoc(re.sub(r"[\"'\\]", "", raw), quoted, op.text == "<<-", op.line)
            self.lx.add_heredoc(heredoc)
        return Redir(op.text, target.word, op.line, heredoc, fd)
