"""Make a job's paths explicit at launch, so every node and the engine read the same absolute values.

Relative ``cluster.runs_dir`` and ``data.dir`` are taken relative to where ``mtk launch`` runs (a cluster node's
working directory differs). Checkpoints default to ``<runs_dir>/<name>/checkpoints``
(:func:`mtk.checkpoint_paths.default_dir`: shared by every run of the same job name, so launching the same spec
again resumes from the latest checkpoint).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mtk import checkpoint_paths

if TYPE_CHECKING:
    from mtk.spec import Job


def _absolute(path: str, base: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def resolve_paths(job: Job, backend: str, cwd: str | None = None) -> Job:
    """A copy of ``job`` with absolute runs, data and checkpoint dirs (a backend's remote paths, e.g. EKS pod paths,
    are kept as written)."""
    from mtk.backends import backend_class

    remote = backend_class(backend).remote_paths
    job = job.model_copy(deep=True)
    if not remote:
        base = cwd or os.getcwd()
        job.cluster.runs_dir = _absolute(job.cluster.runs_dir, base)
        job.data.dir = _absolute(job.data.dir, base)
    ckpt = job.train.checkpoint
    if ckpt.dir is None:
        ckpt.dir = checkpoint_paths.default_dir(job.cluster.runs_dir, job.name)
    elif not remote:
        ckpt.dir = _absolute(ckpt.dir, cwd or os.getcwd())
    return job


def launch_run_dir(job: Job, run_dir: str | None = None) -> str:
    """The run dir ``mtk launch`` would pick for ``job`` now (``job`` as :func:`resolve_paths` returns it):
    ``run_dir`` as given, else ``<runs_dir>/<name>-<UTC time>`` (a name free at this moment). ``mtk render`` and
    ``mtk validate`` render with it, so their files name the paths and objects a launch would submit."""
    if run_dir is not None:
        return run_dir
    from mtk.runs import new_run_dir

    return str(new_run_dir(job.cluster.runs_dir, job.name))
