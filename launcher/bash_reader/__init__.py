"""mtk's bash reader: a launch script read as bash would build its commands, without running anything.

:func:`read` parses the whole script first (what ``bash -n`` refuses is refused, with its message and line), then
follows it: assignments, arrays, expansions and word splitting as bash does them, ``if``/``case``/loops decided where
the script decides them and followed every way where it does not. What only running could tell — a command
substitution, a backquoted command, what ``source`` or ``eval`` sets, a file test — is never guessed and never
run: the value is a named unknown (:class:`~.values.Value`), and the one who reads the commands decides whether it
matters. Every read is bounded (:mod:`.limits`): a hostile script ends in one line, exit 2.

Modules: :mod:`.lexer`, :mod:`.substitutions` and :mod:`.parser` (bash's grammar, into :mod:`.nodes`),
:mod:`.expand` (expansions, into :mod:`.values`), :mod:`.run`, :mod:`.commands` and :mod:`.builtins` (control flow,
simple commands), :mod:`.state` (the ways through a script), :mod:`.arith`, :mod:`.patterns`, :mod:`.conditions`,
:mod:`.script` (what a read gives), :mod:`.limits`, :mod:`.errors`.
"""

from __future__ import annotations

from .errors import BashReadError, BashSyntaxError, LimitError
from .limits import Budget, Depth, check_input
from .parser import parse
from .run import Runner
from .script import Command, Script, sbatch_lines
from .state import State, join
from .values import Value, known

__all__ = ["BashReadError", "BashSyntaxError", "Command", "LimitError", "Script", "Value", "read"]


def read(text: str, source: str = "script", args: list[str] | None = None) -> Script:
    """The commands ``text`` would run as ``bash SCRIPT ARGS...`` (``args`` None: none given, and a plain ``$1``
    is then unknown rather than empty). Raises :class:`BashReadError` (a :class:`~mtk.exitcodes.BadInput`) naming
    ``source`` and the line."""
    try:
        check_input(text)
        _as_bash_reads_it(text)
        depth = Depth()
        program = parse(text, depth)
        script = Script(sbatch=sbatch_lines(text))
        runner = Runner(Budget(), depth, script, sbatch=tuple(script.sbatch))
        start = State(positional=tuple(known(a) for a in args or ()), args_known=args is not None)
        final = runner.run_all(program.body, [start])
        end = (join(final) if len(final) > 1 else final[0]) if final else None
    except BashReadError as exc:
        raise exc.named(source) from None
    except RecursionError:  # the nesting limit keeps well below Python's; this is the last line of defence
        raise LimitError(None, "the script nests too deeply to read").named(source) from None
    if end is not None:
        script.exports = {k: v for k in sorted(end.exported) if isinstance(v := end.vars.get(k), Value)}
        script.arrays = {k: list(v.values()) for k, v in end.vars.items() if isinstance(v, dict)}
    return script


def _as_bash_reads_it(text: str) -> None:
    """What an editor hides and bash does not: a carriage return before each line end (Windows line endings) is
    part of the line's last word to bash (``--bf16\\r``, a flag Megatron-LM does not know), and a byte-order mark
    is part of the first word (``#!/bin/bash`` becomes a command that is not found). Refused by name, with the fix,
    never silently dropped."""
    if text.startswith("\ufeff"):
        raise BashReadError(1, "the file starts with a UTF-8 byte-order mark, which bash reads as part of the first "
                               "word; save the file without it (UTF-8 without BOM)")
    at = text.find("\r\n")
    if at >= 0:
        line = text.count("\n", 0, at) + 1
        last = text[text.rfind("\n", 0, at) + 1:at].split()[-1:] or [""]
        raise BashReadError(line, f"the line ends in a carriage return (Windows line endings): bash passes it as "
                                  f"part of the last word ({last[0][-30:] + chr(13)!r}); convert the file with "
                                  "dos2unix")
