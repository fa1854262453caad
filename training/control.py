"""Run control: SIGTERM/SIGUSR2, save/exit trigger files, and the ``state/last_exit.json`` record.

* SIGTERM or SIGUSR2 (Slurm's time-limit warning, preemption, ``kubectl delete``) only sets a flag; the
  current iteration finishes, a checkpoint is saved, and the worker exits with ``exitcodes.REQUEUE``. So does
  SIGINT (Ctrl-C in the terminal that runs ``run.sh`` or torchrun by hand: torchrun passes it to its workers); a
  second SIGINT interrupts at once (``KeyboardInterrupt``), for whoever will not wait for the save.
* Every ``train.log_interval`` rank 0 looks for ``<run_dir>/triggers/save`` (save, delete it, continue) and
  ``<run_dir>/triggers/exit`` (save, exit ``exitcodes.STOPPED``).
* Flags are all-reduced (SUM) every iteration so all ranks stop or save at the same iteration even if
  only some ranks got the signal.
* Before exiting for any reason rank 0 writes ``state/last_exit.json`` = ``{"code", "iteration", "reason",
  "checkpoint_iteration"}``; ``mtk-entrypoint train`` reads it after torchrun (which reports every
  non-zero worker exit as a plain failure) to choose its own exit code.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtk.files import atomic_write
from mtk.run_layout import RunLayout

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)


@dataclass
class Decision:
    """What to do after this iteration (identical on every rank)."""

    signal: bool = False
    save: bool = False
    exit: bool = False


class Control:
    """Installs the signal handlers and turns flags + trigger files into one agreed Decision."""

    def __init__(self, run_dir: str | Path, rank: int):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.signalled: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in HANDLED_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame) -> None:
        if signum == signal.SIGINT and self.signalled == "SIGINT":
            raise KeyboardInterrupt  # Ctrl-C twice: do not wait for the save
        if self.signalled is None:
            self.signalled = signal.Signals(signum).name

    @property
    def save_trigger(self) -> Path:
        return RunLayout.of(self.run_dir).save_trigger

    @property
    def exit_trigger(self) -> Path:
        return RunLayout.of(self.run_dir).exit_trigger

    def local_flags(self, check_triggers: bool) -> list[float]:
        """This rank's [signal, save trigger, exit trigger]; only rank 0 reads the trigger files (one
        source of truth on shared storage). The caller SUM-reduces them across ranks."""
        flags = [1.0 if self.signalled else 0.0, 0.0, 0.0]
        if check_triggers and self.rank == 0:
            flags[1] = float(self.save_trigger.exists())
            flags[2] = float(self.exit_trigger.exists())
        return flags

    def decision(self, reduced: list[float]) -> Decision:
        """Turn the reduced flags into the Decision every rank acts on."""
        sig, save, exit_ = (x > 0 for x in reduced[:3])
        if sig and self.signalled is None:
            self.signalled = "SIGNAL(peer rank)"
        return Decision(signal=sig, save=save, exit=exit_)

    def consume_save_trigger(self) -> None:
        if self.rank == 0:
            self.save_trigger.unlink(missing_ok=True)

    def consume_exit_trigger(self) -> None:
        """Remove the exit trigger so a later restart (a new `mtk launch`) does not stop at once."""
        if self.rank == 0:
            self.exit_trigger.unlink(missing_ok=True)


def write_last_exit(run_dir: str | Path, code: int, iteration: int, reason: str,
                    checkpoint_iteration: int | None) -> Path:
    """Atomically record why the worker exited (rank 0 only)."""
    path = RunLayout.of(run_dir).last_exit
    record = {"code": int(code), "iteration": int(iteration), "reason": reason,
              "checkpoint_iteration": checkpoint_iteration, "time": time.time()}
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path
