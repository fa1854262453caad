"""Reading rendered sbatch scripts the way sbatch does, for the Slurm render tests."""

from __future__ import annotations


def parse_directive_value(text: str) -> str:
    """sbatch's reading of one ``#SBATCH`` value (the rules of ``_get_argument`` in
    sbatch/opt.c), to check what a rendered directive means to sbatch."""
    out, quoted, escaped = [], False, False
    for ch in text:
        if ch in " \t\n\v\f\r" and not quoted:
            break
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "#":
            break
        else:
            out.append(ch)
    return "".join(out)


def directives(script: str) -> dict[str, list[str]]:
    """#SBATCH options as sbatch reads them: key -> values (flags map to '')."""
    out: dict[str, list[str]] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, raw = line[len("#SBATCH --"):].partition("=")
            out.setdefault(key, []).append(parse_directive_value(raw) if raw else "")
    return out
