"""``mtk render``: write the files ``mtk launch`` would submit into a directory, without submitting anything."""

from __future__ import annotations

from pathlib import Path

import click

from .common import backend_option, job_argument, load, pick_backend, set_option


@click.command("render")
@job_argument
@set_option
@backend_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Directory to write into; only where the files go (the paths and names in them are the spec's).")
@click.option("--run-dir", default=None,
              help="The run dir the files name, as for `mtk launch --run-dir` (default: <runs_dir>/<name>-<time>, "
                   "the one a launch now would make).")
def command(job_file, overrides, backend, out, run_dir):
    """Write the run files for JOB.yaml into --out: what `mtk launch` would submit (same bytes for the same spec
    and --run-dir)."""
    from mtk.backends import get_backend

    from ..launch_render import render_as_launched

    backend, _ = pick_backend(job_file, overrides, backend)
    impl = get_backend(backend)
    artifacts, said = render_as_launched(impl, load(job_file, overrides, backend), run_dir)
    said += [f"note: {line}" for line in impl.check_render(artifacts)]  # refused here: nothing is written
    for line in said:
        click.echo(line, err=True)
    for path in artifacts.write(Path(out).absolute()):
        click.echo(str(path))
    for note in artifacts.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"run dir: {artifacts.run_dir} (the files name it; a launch makes it)", err=True)
