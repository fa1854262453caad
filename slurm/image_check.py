"""The Pyxis image must be a file this machine can read before ``mtk launch --backend slurm`` submits.

A missing ``.sqsh`` is otherwise found by Pyxis on the first node, after the job waited in the queue, as a
failed container start. The launching machine sees the cluster's shared storage (run dirs live there), so a
path it cannot read is refused here. An image *reference* in ``cluster.slurm.container_image``
(``nvcr.io#nvidia/pytorch:25.09-py3``) is pulled by enroot on the nodes and is not checked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mtk.spec.errors import Problem

if TYPE_CHECKING:
    from mtk.spec import Job


def _is_path(image: str) -> bool:
    return image.startswith(("/", "./", "../", "~")) or image.endswith((".sqsh", ".squashfs"))


def image_problems(job: Job) -> list[Problem]:
    s = job.cluster.slurm
    if s.runtime != "pyxis":
        return []
    field = "cluster.slurm.container_image" if s.container_image else "image.sqsh"
    image = s.container_image or job.image.sqsh
    if not image or not _is_path(image):
        return []  # no image at all is the spec checks' refusal; a registry reference is enroot's to pull
    path = os.path.expanduser(image)
    if os.path.isfile(path) and os.access(path, os.R_OK):
        return []
    why = ("is a directory, not a .sqsh file" if os.path.isdir(path) else
           "exists but this user cannot read it" if os.path.exists(path) else
           "does not exist on this machine")
    fix = ("build it with `mtk build-image --sqsh` (written where image.sqsh points, on storage the nodes share)"
           if field == "image.sqsh" else
           "build one with `mtk build-image --sqsh` and point cluster.slurm.container_image at it, or give an "
           "image reference (e.g. nvcr.io#nvidia/pytorch:25.09-py3)")
    return [Problem(field, f"the Pyxis runtime's image {why}: every node would fail to start the container after "
                    f"the job queued. {fix[0].upper()}{fix[1:]}", image)]
