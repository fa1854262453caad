"""Where a job's checkpoints live: the one rule for the checkpoint dir and the tracker file's name (the neutral
core: imports nothing of mtk).

One rule, :func:`checkpoint_dir`: ``train.checkpoint.dir`` when set, else ``<run_dir>/checkpoints``. The engine
writes there, and everything that looks for a job's checkpoints (the resume precheck, the launch checks, the
preflight's storage probe, the Slurm render, ``mtk convert`` of a run, pruning) asks the same function.

``mtk launch`` never leaves the dir unset: it writes ``<runs_dir>/<name>/checkpoints`` into the job
(:func:`default_dir`, through ``launcher.paths.resolve_paths``), shared by every run of the same job name, so
launching the same spec again resumes from the latest checkpoint (as Megatron's ``--save``/``--load`` pair does).
Only a job file that did not come through a launch (the engine or a node step started by hand on a ``job.json``)
reaches the fallback; its checkpoints then belong to its run dir, which a restart of that run shares.
"""

from __future__ import annotations

import os

CHECKPOINTS_DIR = "checkpoints"
# Megatron's tracker: the iteration to resume from. The Slurm step script (slurm/templates/step.sh.j2) reads it
# by this name too (a template without values: tests/unit/test_checkpoint_paths.py keeps the two equal).
TRACKER = "latest_checkpointed_iteration.txt"


def default_dir(runs_dir: str, name: str) -> str:
    """``<runs_dir>/<name>/checkpoints``: what a launch writes into ``train.checkpoint.dir`` when the spec leaves it
    unset (never a fallback of its own: a reader asks :func:`checkpoint_dir`)."""
    return f"{runs_dir.rstrip('/')}/{name}/{CHECKPOINTS_DIR}"


def checkpoint_dir(configured: str | None, run_dir: str | os.PathLike[str]) -> str:
    """``train.checkpoint.dir`` (``configured``) when set, else ``<run_dir>/checkpoints``."""
    return configured or f"{os.fspath(run_dir).rstrip('/')}/{CHECKPOINTS_DIR}"
