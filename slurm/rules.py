"""What a job must say to run on Slurm, checked before any cluster time (``SlurmBackend.validate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtk.spec.errors import Problem

if TYPE_CHECKING:
    from mtk.spec import Job


def problems(job: Job) -> list[Problem]:
    s, out = job.cluster.slurm, []
    if s.runtime == "pyxis" and not (s.container_image or job.image.sqsh):
        out.append(Problem("cluster.slurm.container_image", "the pyxis runtime needs an image: set "
                           "image.sqsh (from `mtk build-image --sqsh`) or cluster.slurm.container_image"))
    if s.runtime == "bare" and s.venv and s.conda_env:
        out.append(Problem("cluster.slurm.conda_env", "set either cluster.slurm.venv or conda_env, not both"))
    return out
