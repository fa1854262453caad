"""Reading rendered sbatch scripts the way sbatch does, for the Slurm render tests."""

from __future__ import annotations

from mtk.slurm.quoting import parse_directive_value


def directives(script: str) -> dict[str, list[str]]:
    """#SBATCH options as sbatch reads them: key -> values (flags map to '')."""
    out: dict[str, list[str]] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, raw = line[len("#SBATCH --"):].partition("=")
            out.setdefault(key, []).append(parse_directive_value(raw) if raw else "")
    return out
