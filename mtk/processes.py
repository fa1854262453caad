"""Whether a process of this host still runs, for the code that also runs in the plain CLI install.

``mtk launch`` judges a checkpoint-dir lease left by a process of this host (:mod:`mtk.training.lease`) and the
local backend watches its runner (:mod:`mtk.launcher.local`) on a login node, where the base install has no psutil
(it comes with the ``train`` extra): so the one check reads what psutil would, ``/proc/<pid>/stat``'s state.
"""

from __future__ import annotations

import os

# A zombie (ended, not yet reaped: a killed run's process whose parent is gone, where a container's init does not
# reap) and a dead task still answer signal 0; they run nothing.
ENDED_STATES = ("Z", "X")


def state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (R, S, D, Z, ...; "" where /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]  # after the command name, which may hold spaces and ')'
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs on this host: it exists (another user's counts: signal 0 is refused, not missing) and
    is no zombie. Where /proc cannot say, an existing process counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return state(pid) not in ENDED_STATES
