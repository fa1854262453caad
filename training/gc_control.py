"""Manual garbage collection (``train.manual_gc``, Megatron-LM's ``--manual-gc``).

Python's threshold-triggered collector runs whenever one rank's allocation count says so, so each rank pauses at
a different step and the others wait for it at the next collective. With manual GC the automatic collector is
off for the run and every rank collects at the same points: once at the start, before and after each
evaluation, and every ``manual_gc_interval`` iterations when that is set.
"""

from __future__ import annotations

import gc


class ManualGC:
    def __init__(self, enabled: bool, interval: int):
        self.enabled = enabled
        self.interval = interval
        self.collections = 0
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        if self.enabled:
            gc.disable()
            self.collect()

    def collect(self) -> None:
        if self.enabled:
            gc.collect()
            self.collections += 1

    def after_step(self, iteration: int) -> None:
        if self.enabled and self.interval and iteration % self.interval == 0:
            self.collect()

    def stop(self) -> None:
        """Give the process its automatic collector back (the state it had before :meth:`start`)."""
        if self.enabled and self._was_enabled:
            gc.enable()
