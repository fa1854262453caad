"""``mtk schema``: the job spec's JSON schema, for editors that check a ``mtk.yaml`` as it is typed."""

from __future__ import annotations

import click


@click.command("schema")
@click.option("--out", type=click.Path(dir_okay=False), help="Write it to this file instead of standard output.")
def command(out):
    """Print the JSON schema of the job spec (every field, its type, default and description).

    Point a YAML language server at it with a first line ``# yaml-language-server: $schema=mtk.schema.json``."""
    import json

    from mtk.spec.reference import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if out:
        from mtk.files import atomic_write

        atomic_write(out, text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)
