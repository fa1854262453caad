"""``mtk import``: a Megatron-LM launch script or argument list becomes an mtk job spec."""

from __future__ import annotations

import sys
from pathlib import Path

import click

ORDER = ("name", "cluster", "model", "parallel", "train", "data")


def spec_yaml(spec: dict, not_imported: list[tuple[str, str]], notes: list[str], source: str) -> str:
    """The spec through the YAML serializer, under comments listing every flag left out and every reading to check."""
    import yaml

    def comment(text: str) -> str:
        return " ".join(text.split())  # one line: a value may hold a newline

    head = [f"# Imported by `mtk import` from {comment(source)}: each Megatron-LM flag mtk models is a field below."]
    if not_imported:
        head.append(f"# Not imported ({len(not_imported)}):")
        head += [f"#   {comment(flag)}: {comment(why)}" for flag, why in not_imported]
    if notes:
        head.append("# Read this way (check):")
        head += [f"#   {comment(note)}" for note in notes]
    ordered = {key: spec[key] for key in ORDER if key in spec} | {k: v for k, v in spec.items() if k not in ORDER}
    return "\n".join(head) + "\n" + yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True)


@click.command("import")
@click.argument("script", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--out", "-o", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the spec here (default: print it).")
@click.option("--name", default=None, help="The job's name (default: #SBATCH --job-name, else the script's name).")
def command(script: str, out: str | None, name: str | None) -> None:
    """Turn a Megatron-LM launch script or argument list (pretrain_gpt.py with torchrun, srun or sbatch around it,
    bash arrays, a megatron_lm_args.txt) into an mtk spec. Flags mtk does not model are listed with why."""
    from mtk.launcher.megatron_import import import_text

    from mtk import exitcodes
    from mtk.files import atomic_write
    from mtk.spec.errors import SpecError
    from mtk.spec.loader import validate

    if script == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(script).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise exitcodes.BadInput(f"SCRIPT: cannot read {script}: {exc}; pass a launch script or argument list"
                                     ) from None
    result = import_text(text, name=name, source=script if script != "-" else "stdin")
    if not result.flags:
        raise click.BadParameter(f"{script}: no Megatron-LM arguments found (no pretrain_*.py command, argument "
                                 "list or array of --flags)", param_hint="SCRIPT")
    rendered = spec_yaml(result.spec, result.not_imported, result.notes, script)
    if out:
        atomic_write(Path(out), rendered)
        click.echo(f"wrote {out}; not imported: {len(result.not_imported)} flags (listed at its top)", err=True)
    else:
        click.echo(rendered, nl=False)
    from mtk.backends import infer_backend

    backend, _why = infer_backend(result.spec.get("cluster"), script)  # as `mtk validate` picks it
    try:
        validate(result.spec, backend=backend)
    except SpecError as exc:  # the spec is written (or printed) above; what to fix in it, exit 2
        raise exitcodes.BadInput(f"the imported spec does not validate yet; fix these, then `mtk validate`:\n{exc}"
                                 ) from None
