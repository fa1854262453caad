"""Where a job's checkpoints live: the one home of the checkpoint dir's default and of the tracker file's name
(the neutral core: imports nothing of mtk).

``mtk launch`` writes the default into ``train.checkpoint.dir`` (:func:`default_dir`, through
``launcher.paths.resolve_paths``): ``<runs_dir>/<name>/checkpoints``, shared by every run of the same job name, so
launching the same spec again resumes from the latest checkpoint (as Megatron's ``--save``/``--load`` pair does).
A job file that did not come through a launch (the engine or a node step started by hand on a ``job.json``) may
have no dir set; it then checkpoints under its own run dir (:func:`checkpoint_dir`).
"""

from __future__ import annotations

import os

CHECKPOINTS_DIR = "checkpoints"
# Megatron's tracker: the iteration to resume from. The Slurm step script (slurm/templates/step.sh.j2) reads it
# by this name too (a template without values: tests/unit/test_checkpoint_paths.py keeps the two equal).
TRACKER = "latest_checkpointed_iteration.txt"


def default_dir(runs_dir: str, name: str) -> str:
    """``<runs_dir>/<name>/checkpoints``: what a launch sets ``train.checkpoint.dir`` to when the spec leaves it."""
    return f"{runs_dir.rstrip('/')}/{name}/{CHECKPOINTS_DIR}"


def checkpoint_dir(configured: str | None, run_dir: str | os.PathLike[str]) -> str:
    """``train.checkpoint.dir`` (``configured``) when set, else ``<run_dir>/checkpoints``."""
    return configured or f"{os.fspath(run_dir).rstrip('/')}/{CHECKPOINTS_DIR}"
