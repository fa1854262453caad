"""Pin an EKS launch to the image ``mtk build-image`` built, by its content tag.

A mutable tag (``latest``) lets a push between elastic restarts change the code a running job executes:
replaced pods would pull the new image. ``build-image`` tags every build with ``sha-<content hash>`` and
records the tags in ``build/mtk-image/<name>/build.json``; the launch uses that tag instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec.job import Job

MUTABLE_TAGS = {"latest", "main", "master", "dev", "nightly", "stable"}
CONTENT_PREFIX = "sha-"


def build_record(job: Job, root: str | Path = ".") -> Path:
    return Path(root) / "build" / "mtk-image" / job.name / "build.json"


def pin_image(job: Job, root: str | Path = ".") -> tuple[Job, str]:
    """(job with a content tag, a note for the user). Tags that are not mutable stay as the user set them."""
    if job.image.tag not in MUTABLE_TAGS:
        return job, ""
    record = build_record(job, root)
    try:
        rec = json.loads(record.read_text())
        tags = [] if rec.get("dry_run") else [t for t in rec.get("tags", []) if isinstance(t, str)]
    except (OSError, ValueError, AttributeError):
        tags = []
    content = next((t.rsplit(":", 1)[1] for t in tags if t.rsplit(":", 1)[-1].startswith(CONTENT_PREFIX)
                    and t.rsplit(":", 1)[0] == job.image.name), None)
    if content is None:
        return job, (f"warning: image.tag '{job.image.tag}' is mutable and {record} names no build: pods restarted "
                     "later may pull different code. Run `mtk build-image --push` first, or set image.tag to a "
                     "content tag (sha-...)")
    pinned = job.model_copy(deep=True)
    pinned.image.tag = content
    return pinned, f"image pinned to {pinned.image.reference} (content tag from {record})"
