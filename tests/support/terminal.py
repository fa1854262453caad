"""Start a process with the signals a terminal's foreground job has, whatever the test suite inherited.

Why: a suite started in the background of a non-interactive shell (``make test &``, ``nohup``) runs with SIGINT
ignored, and an ignored disposition survives ``exec``: Python then installs no KeyboardInterrupt handler, and a
test's Ctrl-C (SIGINT to the launch's process group) would reach a launch that cannot hear it. A user's terminal
never starts ``mtk launch`` that way.
"""

from __future__ import annotations

import signal


def as_a_terminal_starts_it() -> None:
    """``preexec_fn``: SIGINT and SIGQUIT back to their defaults in the child before it execs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
