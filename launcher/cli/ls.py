"""``mtk ls``: the runs under the runs dir, newest first, one line each."""

from __future__ import annotations

import click

from .common import runs_dir_option


@click.command("ls")
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (one object per run).")
@click.option("--all", "previews", is_flag=True, help="Also list previews: run dirs that render/--dry-run wrote.")
def command(runs_dir, as_json, previews):
    """List runs: name, backend, state, iteration of total, ETA, last loss, tokens/s, restarts, started, age."""
    import json

    from ..runtable import format_table, table

    rows = table(runs_dir, previews=previews)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    if not rows:
        click.echo(f"no runs under {runs_dir}/ (launch one with `mtk launch`)")
        return
    click.echo(format_table(rows))
    for r in rows:
        if r.reason and r.state != "RENDERED":
            click.echo(f"  {r.name}: {r.reason}")
