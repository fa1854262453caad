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
        depth = Depth()
        program = parse(text, depth)
        script = Script(sbatch=sbatch_lines(text))
        runner = Runner(Budget(), depth, script, sbatch=tuple(script.sbatch))
        start = State(positional=tuple(known(a) for a in args or ()), args_known=args is not None)
        final = runner.run_all(program.body, [start])
    except BashReadError as exc:
        raise exc.named(source) from None
    except RecursionError:  # the nesting limit keeps well below Python's; this is the last line of defence
        raise LimitError(None, "the script nests too deeply to read").named(source) from None
    if final:
        end = join(final) if len(final) > 1 else final[0]
        script.exports = {k: v for k in sorted(end.exported) if isinstance(v := end.vars.get(k), Value)}
        script.arrays = {k: list(v.values()) for k, v in end.vars.items() if isinstance(v, dict)}
    return script
