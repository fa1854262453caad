"""A refusal raised inside the engine: the job cannot run as asked, and the message already names why and the fix.

Such a refusal is bad input (exit 2), shown once as that one line by rank 0 — not as each rank's traceback plus
torchrun's ``ChildFailedError`` report. A refusal one rank decides (rank 0's checkpoint-dir lease) is shared with
every rank first, so that all of them stop together and none dies in a collective its peer left.
"""

from __future__ import annotations

from mtk.exitcodes import BadInput


class Refused(BadInput, RuntimeError):
    """The engine will not run this job; ``str(exc)`` is the one line for the user."""


def refuse_together(reason: str | None) -> None:
    """Every rank raises :class:`Refused` with the line of the lowest rank that has a ``reason``, or none does:
    one all-reduce, and a broadcast of that line only when some rank refuses. For what a rank finds on its own
    node (another user's node-local folder) before anything collective has run."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    first = torch.tensor([float(dist.get_rank() if reason else world)], device=torch.cuda.current_device())
    dist.all_reduce(first, op=dist.ReduceOp.MIN)
    src = int(first.item())
    if src >= world:
        return
    line = [reason]
    dist.broadcast_object_list(line, src=src)
    raise Refused(str(line[0]))
