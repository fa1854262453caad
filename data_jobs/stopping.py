"""A data step stopped by SIGTERM or SIGINT (``scancel``, a time limit, Ctrl-C): one message and a documented exit
code instead of tracebacks from every worker process.

The coordinator turns the signal into :class:`Stopped`, which unwinds through the worker pool (the pool is
terminated, so workers never write to a closed pipe) and the locks; the step then raises :class:`StepStopped`,
which the error boundary prints as one line, exiting ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), as a
shell reports a process killed by that signal. Everything the step
publishes is written under a temp name and renamed, and :func:`deferred` holds the signal across a group of
renames that belong together (a ``.bin`` and its ``.idx``), so a stop never leaves half an output; finished
shards are kept and a rerun resumes from them.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

from mtk.exitcodes import UserFacingError

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_state: dict = {"defer": 0, "pending": None}


class Stopped(BaseException):
    """Internal control flow: raised in the coordinator when a stop signal arrives (a BaseException, so no
    ``except Exception`` eats it); the step turns it into :class:`StepStopped` once everything has unwound."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StepStopped(UserFacingError):
    """A data step ended by SIGTERM/SIGINT, all of it unwound: what was kept and how to resume; exit 128 + N."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


def _handler(signum: int, _frame) -> None:
    if _state["defer"]:
        _state["pending"] = signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGINT raise :class:`Stopped` (main thread only; the previous handlers come
    back afterwards, so a caller such as a test process keeps its own)."""
    try:
        previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def ignore_in_worker() -> None:
    """Pool workers leave stopping to the coordinator: Ctrl-C reaches the whole process group, and the
    coordinator then terminates the pool (SIGTERM, whose default action ends a worker without a traceback; a
    forked worker inherits the coordinator's handler, hence the reset)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal until the block is done (renames that must happen together), then stop."""
    _state["defer"] += 1
    try:
        yield
    finally:
        _state["defer"] -= 1
        pending, _state["pending"] = _state["pending"], None
        if pending is not None and not _state["defer"] and signal.getsignal(pending) is _handler:
            raise Stopped(pending)
