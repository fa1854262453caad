"""The reader's bounds. A launch script is a few KB with a handful of nested blocks; these are orders of magnitude
above that and far below what would take a second or a lot of memory, so a hostile or broken script ends in one
line (:class:`~.errors.LimitError`) instead of a traceback or a killed process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .errors import LimitError

MAX_INPUT_BYTES = 256 * 1024  # the largest Megatron-LM example launcher is 7.6 KB
MAX_NESTING = 50  # blocks, substitutions and quotes inside each other
MAX_VALUE_CHARS = 1 << 20  # one expanded word or variable
MAX_EXPANDED_CHARS = 4 << 20  # every expansion of a read together (a word costs 64 more: its bookkeeping)
WORD_COST = 64
MAX_STEPS = 100_000  # commands run, loop turns and function calls of a read
MAX_CALL_DEPTH = 40  # functions calling functions (and scripts run by `bash -c`)


def check_input(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_INPUT_BYTES:
        raise LimitError(None, f"the script is {size:,} bytes; mtk import reads launch scripts up to "
                               f"{MAX_INPUT_BYTES // 1024} KiB (pass the script that runs pretrain_gpt.py, not data)")


class Budget:
    """What one read may spend: steps and expanded characters, counted as they are spent."""

    def __init__(self) -> None:
        self.steps = 0
        self.chars = 0

    def step(self, line: int) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise LimitError(line, f"the script runs more than {MAX_STEPS:,} commands, loop turns or calls "
                                   "(a loop or recursion that does not end?)")

    def fits(self, chars: int, line: int) -> None:
        """Before a value of ``chars`` characters is built (every builder asks first, as the value grows)."""
        if chars > MAX_VALUE_CHARS:
            raise LimitError(line, f"a value grows past {MAX_VALUE_CHARS // 1024} KiB ({chars:,} characters)")

    def room(self, chars: int, line: int) -> None:
        """Before expansions of ``chars`` characters (bookkeeping included) are gathered: what the read has left."""
        if self.chars + chars > MAX_EXPANDED_CHARS:
            raise LimitError(line, f"the script's expansions pass {MAX_EXPANDED_CHARS >> 20} MiB together (a value or "
                                   "an array that keeps doubling?)")

    def spend(self, chars: int, line: int, words: int = 0) -> None:
        self.fits(chars, line)
        self.room(chars + words * WORD_COST, line)
        self.chars += chars + words * WORD_COST


def nesting(depth: int, line: int) -> None:
    if depth > MAX_NESTING:
        raise LimitError(line, f"blocks, substitutions or quotes nested deeper than {MAX_NESTING} levels")


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
