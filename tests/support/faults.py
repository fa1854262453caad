"""Environment for a training process that should crash at a chosen point (see ``fault_site/sitecustomize.py``)."""

from __future__ import annotations

import os
from pathlib import Path

SITE = Path(__file__).resolve().parent / "fault_site"


def crash_env(fault: str) -> dict[str, str]:
    """``fault`` e.g. ``save:8`` or ``slow-shard:1:2``; the returned variables go into the environment of the
    process that starts the work (torchrun, or ``mtk launch`` for a Slurm job), which its children inherit."""
    path = os.pathsep.join(p for p in (str(SITE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MTK_FAULT": fault}
