"""The one way the bash reader refuses a script: a :class:`~mtk.exitcodes.BadInput` naming the line.

A syntax error is worded as ``bash -n`` words it (same line, same message), so a user can check it with bash;
a limit (input size, nesting, expansion size, work) says which limit and what it is.
"""

from __future__ import annotations

from mtk.exitcodes import BadInput


class BashReadError(BadInput):
    """The script cannot be read: ``line`` is where (None: the whole input)."""

    def __init__(self, line: int | None, what: str, source: str = "") -> None:
        self.line, self.what, self.source = line, what, source
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{self.source}: {where}{self.what}" if self.source else f"{where}{self.what}"

    def named(self, source: str) -> BashReadError:
        """The same error, saying which file."""
        return type(self)(self.line, self.what, source)


class BashSyntaxError(BashReadError):
    """What ``bash -n`` refuses: the script would not run at all."""


class LimitError(BashReadError):
    """A bound on the reader's work or memory was reached: a launch script never comes near one."""
