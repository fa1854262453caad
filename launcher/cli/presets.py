"""``mtk presets``: the model presets a spec can name in ``model.preset``, with their sizes."""

from __future__ import annotations

import click


@click.command("presets")
@click.option("--json", "as_json", is_flag=True, help="Every preset's fields, machine-readable.")
def command(as_json):
    """List the model presets: layers, hidden size, heads (KV groups), sequence length, vocabulary, parameters."""
    import json

    from mtk.spec.presets import PRESETS

    if as_json:
        click.echo(json.dumps(PRESETS, indent=2, sort_keys=True))
        return
    from mtk.figures import parameter_counts
    from mtk.spec import Job

    rows = [("preset", "arch", "layers", "hidden", "heads", "kv groups", "seq", "vocab", "parameters")]
    for name in PRESETS:
        job = Job.model_validate({"name": "preset", "model": {"preset": name}})
        m = job.model
        total, _ = parameter_counts(job)
        rows.append((name, m.arch, str(m.num_layers), str(m.hidden_size), str(m.num_attention_heads),
                     str(m.query_groups), str(m.seq_length), f"{m.vocab_size:,}", _human(total)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                       strict=True))))
    click.echo("use one with `model: {preset: NAME}`; any model field set beside it overrides the preset's")


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)
