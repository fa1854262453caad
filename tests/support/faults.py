"""Faults a test injects into the processes it starts (see ``fault_site/sitecustomize.py``): a crash at a chosen
point, or a hold — the run waits at a chosen point until the test releases it, so a test that must act mid-run
acts at a known point however fast the machine is."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SITE = Path(__file__).resolve().parent / "fault_site"


def crash_env(fault: str) -> dict[str, str]:
    """``fault`` e.g. ``save:8`` or ``hold:6:/tmp/x``; the returned variables go into the environment of the
    process that starts the work (torchrun, or ``mtk launch`` for a Slurm job), which its children inherit."""
    path = os.pathsep.join(p for p in (str(SITE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MTK_FAULT": fault}


class Hold:
    """Training ranks that stop before iteration N+1 for each N in ``after`` (iterations 1..N done) until the test
    calls :meth:`release`; a restart that passes the point again after the release goes on."""

    def __init__(self, folder: Path, after: Iterable[int]):
        self.dir, self.after = Path(folder), tuple(after)
        self.dir.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        return crash_env(f"hold:{','.join(map(str, self.after))}:{self.dir}")

    def held(self, iteration: int, ranks: int) -> bool:
        """Whether all ``ranks`` ranks wait after ``iteration``."""
        return all((self.dir / f"held.{iteration}.rank{r}").exists() for r in range(ranks))

    def signalled(self, iteration: int) -> bool:
        """Whether a rank waiting after ``iteration`` has caught SIGTERM/SIGUSR2 (the flags are all-reduced, so
        every rank acts on it at the next iteration)."""
        return any(self.dir.glob(f"signalled.{iteration}.rank*"))

    def release(self, iteration: int) -> None:
        (self.dir / f"release.{iteration}").touch()


class ShardHold:
    """A preprocess process (in Slurm array task ``task``; None: any) that stops once it has finished ``count``
    shards, until :meth:`release` (the tests kill it there instead)."""

    def __init__(self, folder: Path, count: int, task: int | None = None):
        self.dir, self.count, self.task = Path(folder), count, task
        self.dir.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        return crash_env(f"hold-shard:{'*' if self.task is None else self.task}:{self.count}:{self.dir}")

    def held(self) -> int:
        """How many processes wait."""
        return len(list(self.dir.glob("held.*")))

    def release(self) -> None:
        (self.dir / "release").touch()
