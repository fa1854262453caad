"""``mtk render``: write a backend's files to a directory without submitting anything."""

from __future__ import annotations

from pathlib import Path

import click

from .common import backend_option, job_argument, load, pick_backend, set_option


@click.command("render")
@job_argument
@set_option
@backend_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory to write into.")
def command(job_file, overrides, backend, out):
    """Write the run files for JOB.yaml into --out (same bytes for the same spec)."""
    from mtk.backends import get_backend

    from ..paths import resolve_paths

    backend, _ = pick_backend(job_file, overrides, backend)
    job = resolve_paths(load(job_file, overrides, backend), backend)
    artifacts = get_backend(backend).render(job, str(Path(out).absolute()))
    for path in artifacts.write():
        click.echo(str(path))
