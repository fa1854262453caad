"""A node whose torchrun agent reaches the exit barrier's wait only after the store's host has left the barrier.

Why: the race ``mtk/launcher/store_keeper.py`` closes — the host's agent passes the exit barrier and returns while
another agent is between its check-in and its wait — happens by chance on a loaded machine. This makes it happen
every time: after checking in, this agent holds its wait until the host process has either exited (the race lost:
the wait then fails on a closed store) or counted itself out and is keeping the store up (the keeper's job).
Run as ``python late_exit_barrier.py <torchrun args>`` with ``STORE_HOST_PID`` set to the hosting process.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import psutil
from mtk.launcher import quiet_torchrun
from mtk.launcher.store_keeper import LEFT_KEY, store_place
from torch.distributed import TCPStore
from torch.distributed.elastic.utils import store as store_util

_check_in = store_util._barrier_nonblocking


def _host_left_or_keeps_store() -> None:
    place = store_place(sys.argv[1:])
    host = psutil.Process(int(os.environ["STORE_HOST_PID"]))
    store = TCPStore(place.host, place.port, is_master=False, timeout=timedelta(seconds=10))
    while host.is_running() and host.status() != psutil.STATUS_ZOMBIE:
        try:
            if store.check([LEFT_KEY]):
                return
        except Exception:  # the store went away with its host
            return
        time.sleep(0.02)


def _late_check_in(store, world_size: int, key_prefix: str) -> str:
    key = _check_in(store, world_size, key_prefix)
    if "terminal_state" in key_prefix:  # the exit barrier, not the rendezvous' own
        _host_left_or_keeps_store()
    return key


store_util._barrier_nonblocking = _late_check_in

if __name__ == "__main__":
    sys.exit(quiet_torchrun.main())
