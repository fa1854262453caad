"""Render a spec exactly as ``mtk launch`` would submit it, without a run dir, a submission or a cluster.

``mtk render --out DIR`` and ``mtk validate`` use it: the paths are made absolute as the launch makes them
(:func:`launcher.paths.resolve_paths`), the run dir is the one the launch would pick (``<runs_dir>/<name>-<UTC
time>``, or ``--run-dir``), a relaunch's recorded node exclusions and the image's content tag are applied the same
way, and ``megatron_lm_args.txt`` (:mod:`.megatron_args_file`) joins them as it joins a launch's. So the files differ
from a launch's only by the run dir's time stamp; where they are written is the caller's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .megatron_args_file import with_args_file
from .paths import launch_run_dir, resolve_paths

if TYPE_CHECKING:
    from mtk.backends import Artifacts, Backend
    from mtk.spec import Job


def render_as_launched(impl: Backend, job: Job, run_dir: str | None = None) -> tuple[Artifacts, list[str]]:
    """(the artifacts ``mtk launch`` would write for ``job`` on ``impl``, the lines the launch would print about
    what it changed: nodes avoided, the image pinned)."""
    job = resolve_paths(job, impl.name)
    target = launch_run_dir(job, run_dir)
    said: list[str] = []
    if impl.excludes_nodes:
        from mtk.exclusions import with_recorded_exclusions

        job, note = with_recorded_exclusions(job, target)
        if note:
            said.append(f"note: {note}")
    job, pinned = impl.pin_image(job)
    if pinned:
        said.append(pinned)
    return with_args_file(impl.render(job, target), job), said
