"""``mtk import``: a Megatron-LM launch script or argument list becomes an mtk job spec that trains what the script
trains, or nothing is written and the reason names the flag or line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

ORDER = ("name", "cluster", "model", "parallel", "train", "data")
SHOWN = 40  # refused flags listed on stderr (a generated script may hold thousands)


def spec_yaml(verdict, source: str) -> str:
    """The spec through the YAML serializer, under comments: what was dropped (first), what was ignored, and every
    reading to check."""
    import yaml

    result = verdict.imported

    def one(text: str) -> str:
        return " ".join(text.split())  # one line: a value may hold a newline

    where = f" ({result.entry}, line {result.line})" if result.entry else ""
    head = [f"# Imported by `mtk import` from {one(source)}{where}: each Megatron-LM flag mtk models is a field below."]
    if verdict.dropped:
        head.append(f"# DROPPED with --allow-dropped ({len(verdict.dropped)}): each changes what the script trains, "
                    "and this spec does not do it:")
        head += [f"#   {one(flag)}: {one(why)}" for flag, why in verdict.dropped]
    if result.ignored:
        head.append(f"# Ignored ({len(result.ignored)}): they do not change what trains:")
        head += [f"#   {one(flag)}: {one(why)}" for flag, why in result.ignored]
    if result.notes:
        head.append("# Read this way (check):")
        head += [f"#   {one(note)}" for note in dict.fromkeys(result.notes)]
    spec = result.spec
    ordered = {key: spec[key] for key in ORDER if key in spec} | {k: v for k, v in spec.items() if k not in ORDER}
    return "\n".join(head) + "\n" + yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True)


def _read(script: str) -> str:
    from mtk.exitcodes import BadInput

    if script == "-":
        return sys.stdin.read()
    try:
        return Path(script).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {script}: {exc}; pass a launch script or argument list") from None


def script_arguments(text: str, source: str, args: list[str] | None) -> str:
    """pretrain_gpt.py's arguments as the script passes them, one flag per line in megatron_lm_args.txt's form (so
    `sort` and `diff` compare the two)."""
    import shlex

    from mtk.launcher.bash_reader import read
    from mtk.launcher.megatron_import import argument_list, entry, flags

    script = read(text, source, args)
    found = entry.find(script, source)
    grouped = flags.groups(found[0].argv) if found else argument_list(script, source)
    lines = ["MEGATRON_LM_ARGS=("]
    for group in grouped:
        words = [group.flag, *group.values] if group.flag.text else list(group.values)
        lines.append("  " + " ".join(shlex.quote(v.text) for v in words))
    return "\n".join([*lines, ")"]) + "\n"


@click.command("import")
@click.argument("script", type=click.Path(dir_okay=False, allow_dash=True))
@click.argument("script_args", nargs=-1)
@click.option("--out", "-o", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the spec here (default: print it).")
@click.option("--name", default=None, help="The job's name (default: #SBATCH --job-name, else the script's name).")
@click.option("--allow-dropped", "allow", multiple=True, metavar="FLAG",
              help="Write the spec even though FLAG changes what the script trains and mtk cannot honour it; the "
                   "spec lists it at its top as dropped. Repeat it (or give FLAG,FLAG) for several.")
@click.option("--show-args", is_flag=True,
              help="Print pretrain_gpt.py's arguments as the script passes them (megatron_lm_args.txt's form, for "
                   "a diff with what `mtk render` writes) and stop.")
def command(script: str, script_args: tuple[str, ...], out: str | None, name: str | None, allow: tuple[str, ...],
            show_args: bool) -> None:
    """Turn a Megatron-LM launch script or argument list (pretrain_gpt.py with torchrun, srun or sbatch around it,
    bash arrays, a megatron_lm_args.txt) into an mtk spec that trains what the script trains. SCRIPT_ARGS are the
    script's own arguments, as `bash SCRIPT SCRIPT_ARGS...` gets them. A flag that changes what trains and that mtk
    cannot honour stops the import (exit 2) unless --allow-dropped names it."""
    from mtk.launcher.megatron_import.verdict import judge

    from mtk.exitcodes import BadInput
    from mtk.files import atomic_write

    text = _read(script)
    source = script if script != "-" else "stdin"
    args = list(script_args) if script_args else None
    if show_args:
        click.echo(script_arguments(text, source, args), nl=False)
        return
    allow_set = {a.strip() for item in allow for a in item.split(",") if a.strip()}
    verdict = judge(text, source, name=name, args=args, allow=allow_set)
    if verdict.blocking:
        for flag, why in verdict.blocking[:SHOWN]:
            click.echo(f"  {flag}: {why}", err=True)
        if len(verdict.blocking) > SHOWN:
            click.echo(f"  ... and {len(verdict.blocking) - SHOWN} more", err=True)
        names = sorted({f.split(" ")[0] for f, _ in verdict.blocking})
        flags = ",".join(names) if len(names) <= SHOWN else f"{','.join(names[:SHOWN])},... (all {len(names)})"
        raise BadInput(f"{source}: {len(verdict.blocking)} of its settings change what it trains and mtk cannot honour "
                       f"them (listed above); nothing written. Change the script, or write the spec without them: "
                       f"--allow-dropped {flags}")
    rendered = spec_yaml(verdict, source)
    if out:
        atomic_write(Path(out), rendered)
        click.echo(f"wrote {out}: {len(verdict.imported.honoured)} flags in the spec, {len(verdict.imported.ignored)} "
                   f"ignored, {len(verdict.dropped)} dropped (listed at its top)", err=True)
    else:
        click.echo(rendered, nl=False)
    if verdict.problems:
        raise BadInput(f"the imported spec does not validate yet; fix these, then `mtk validate`:\n{verdict.problems}")
