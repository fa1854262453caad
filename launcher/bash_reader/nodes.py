"""What the parser makes of a script: the parts of a word as written, and the commands.

Plain frozen data: :mod:`.lexer` and :mod:`.parser` build it, :mod:`.expand` and :mod:`.run` read it. Nothing here
runs or expands anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ------------------------------------------------------------------------------------------- the parts of a word


@dataclass(frozen=True)
class Lit:
    """Text as written: ``quoted`` when quoting or a backslash made it literal (no splitting, no glob)."""

    text: str
    quoted: bool = False


@dataclass(frozen=True)
class DQ:
    """``"..."``: its parts expand, their result is never split (and ``""`` is still one empty word)."""

    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Param:
    """``$NAME`` / ``${...}``: ``op`` the operator after the name (``:-``, ``#``, ``/``, ``:`` ...), ``arg`` and
    ``arg2`` its operands (``${X/pat/rep}``, ``${X:off:len}``); ``length`` for ``${#X}``, ``indirect`` ``${!X}``."""

    name: str
    raw: str
    line: int
    index: Word | None = None
    op: str = ""
    arg: Word | None = None
    arg2: Word | None = None
    length: bool = False
    indirect: bool = False


@dataclass(frozen=True)
class CmdSub:
    """``$(...)`` or a backquoted command: only running the script could tell its output."""

    raw: str
    line: int


@dataclass(frozen=True)
class Arith:
    """``$((...))``: the expression expands first (``$X`` inside), then evaluates as bash's integer arithmetic."""

    expr: Word
    raw: str
    line: int


@dataclass(frozen=True)
class Opaque:
    """Something only running could tell (``<(cmd)``, ``~``): ``why`` says what."""

    raw: str
    line: int
    why: str


Part = Lit | DQ | Param | CmdSub | Arith | Opaque


def merged(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent literal parts of the same quoting joined (one part per run, not per character)."""
    out: list[Part] = []
    for part in parts:
        last = out[-1] if out else None
        if isinstance(part, Lit) and isinstance(last, Lit) and last.quoted == part.quoted:
            out[-1] = Lit(last.text + part.text, part.quoted)
        else:
            out.append(part)
    return tuple(out)


@dataclass(frozen=True)
class Word:
    """One word as written: its parts, its source text and line."""

    parts: tuple[Part, ...]
    raw: str
    line: int

    @property
    def plain(self) -> str | None:
        """The word's text when it is unquoted literal text only (a reserved word, a name), else None."""
        if all(isinstance(p, Lit) and not p.quoted for p in self.parts):
            return "".join(p.text for p in self.parts)  # type: ignore[union-attr]
        return None


# ------------------------------------------------------------------------------------------------- commands


@dataclass
class Heredoc:
    """``<<DELIM``: the body is filled in when the line after the command is read."""

    delimiter: str
    quoted: bool
    strip_tabs: bool
    line: int
    body: str = ""
    body_line: int = 0


@dataclass(frozen=True)
class Redir:
    op: str
    target: Word | None
    line: int
    heredoc: Heredoc | None = None
    fd: str = ""


@dataclass(frozen=True)
class Assign:
    """``NAME=value``, ``NAME+=value``, ``NAME[i]=value`` or ``NAME=( ... )`` (``array`` holds the elements)."""

    name: str
    line: int
    value: Word | None = None
    append: bool = False
    index: Word | None = None
    array: tuple[Word, ...] | None = None


@dataclass(frozen=True)
class Simple:
    assigns: tuple[Assign, ...]
    words: tuple[Word | Assign, ...]  # an Assign among the words: `declare A=(...)`, `local X=1`
    redirs: tuple[Redir, ...]
    line: int


@dataclass(frozen=True)
class Pipeline:
    commands: tuple[Node, ...]
    negate: bool
    line: int


@dataclass(frozen=True)
class AndOr:
    first: Node
    rest: tuple[tuple[str, Node], ...]  # ("&&" | "||", pipeline)
    line: int


@dataclass(frozen=True)
class Seq:
    """Commands run one after another; ``background`` for those ended by ``&``."""

    items: tuple[tuple[Node, bool], ...]
    line: int


@dataclass(frozen=True)
class If:
    clauses: tuple[tuple[Seq, Seq], ...]  # (condition, body) of if and each elif
    orelse: Seq | None
    line: int


@dataclass(frozen=True)
class Loop:
    until: bool
    cond: Seq
    body: Seq
    line: int


@dataclass(frozen=True)
class For:
    name: str
    words: tuple[Word, ...] | None  # None: "$@"
    body: Seq
    line: int
    select: bool = False


@dataclass(frozen=True)
class ArithFor:
    raw: str
    body: Seq
    line: int


@dataclass(frozen=True)
class Case:
    subject: Word
    clauses: tuple[tuple[tuple[Word, ...], Seq, str], ...]  # (patterns, body, ";;" | ";&" | ";;&")
    line: int


@dataclass(frozen=True)
class Group:
    body: Seq
    subshell: bool
    line: int


@dataclass(frozen=True)
class Cond:
    """``[[ ... ]]``: words and the operators between them, as written."""

    items: tuple[Word | str, ...]
    line: int


@dataclass(frozen=True)
class ArithCmd:
    expr: Word
    line: int


@dataclass(frozen=True)
class FunctionDef:
    name: str
    body: Node
    line: int


@dataclass(frozen=True)
class Redirected:
    """A compound command with redirections after it (``{ ...; } > log``, ``while ...; done < file``)."""

    node: Node
    redirs: tuple[Redir, ...]
    line: int


Node = Simple | Pipeline | AndOr | Seq | If | Loop | For | ArithFor | Case | Group | Cond | ArithCmd | FunctionDef | \
    Redirected


@dataclass
class Program:
    body: Seq
    heredocs: list[Heredoc] = field(default_factory=list)
