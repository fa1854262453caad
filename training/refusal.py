"""A refusal raised inside the engine: the job cannot run as asked, and the message already names why and the fix.

Such a refusal is bad input (exit 2), shown once as that one line by rank 0 — not as each rank's traceback plus
torchrun's ``ChildFailedError`` report. A refusal one rank decides (rank 0's checkpoint-dir lease) is shared with
every rank first, so that all of them stop together and none dies in a collective its peer left.
"""

from __future__ import annotations

from mtk.exitcodes import BadInput


class Refused(BadInput, RuntimeError):
    """The engine will not run this job; ``str(exc)`` is the one line for the user."""
