"""torchrun as ``mtk-entrypoint train`` runs it: the same program, without its traceback when a stop signal ends it.

Why: Slurm signals every process of a step (``scancel``, preemption) and torchrun's agent answers SIGTERM by telling
its workers to stop — they save and exit (``mtk.training.control``) — and then raising ``SignalException`` to the
top, a 20-line traceback per node in the run's log for an ordinary stop. Here it is one line (``MTK_DEBUG=1``: the
traceback), with torchrun's exit code for it unchanged (1). And the node that hosts the rendezvous store keeps it up
until the other nodes' agents have left it (``store_keeper.py`` says why). mtk's staggered c10d rendezvous
(``--rdzv-backend mtk-c10d``, ``staggered_rendezvous.py``) is a backend torchrun knows here.
"""

from __future__ import annotations

import sys

from mtk import exitcodes
from mtk.failures import debug_enabled


def main() -> int:
    from mtk.launcher.staggered_rendezvous import register
    from mtk.launcher.store_keeper import StoreKeeper, store_place
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    register()
    place = store_place(sys.argv[1:])
    keeper = StoreKeeper(place) if place is not None else None
    try:
        torchrun()
    except SignalException as exc:
        if debug_enabled():
            raise
        print(f"torchrun: stopped by {exc.sigval.name}; its workers were told to stop too (they save first)",
              file=sys.stderr, flush=True)
        return exitcodes.FAILED
    finally:
        if keeper is not None:
            keeper.leave()
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
