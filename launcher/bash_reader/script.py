"""What a read gives :mod:`mtk.launcher.megatron_import`: the commands the script would run (with the words bash
would pass them), the ``#SBATCH`` lines that apply to each, and what the reader could not follow."""

from __future__ import annotations

from dataclasses import dataclass, field

from .values import Value


@dataclass(frozen=True)
class Command:
    """A command the script runs. ``when``: the conditions, as written, that the reader could not decide and that
    lead here. ``via``: how it is reached when not directly (``bash -c`` at line N, the here-document sbatch runs);
    ``wrapper``: the words before that ``bash -c`` (``srun ...``); ``sbatch``: the ``#SBATCH`` lines that apply.
    ``delegated``: the command only hands a text to ``bash -c`` / a here-document, read as its own commands."""

    words: tuple[Value, ...]
    line: int
    when: tuple[str, ...] = ()
    via: str = ""
    wrapper: tuple[Value, ...] = ()
    sbatch: tuple[str, ...] = ()
    delegated: bool = False


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)
    sbatch: list[str] = field(default_factory=list)
    exports: dict[str, Value] = field(default_factory=dict)
    arrays: dict[str, list[Value]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # conditions decided from defaults the script assumed
    unread: list[str] = field(default_factory=list)  # what the reader did not follow (source, eval, ...)
    exits: list[str] = field(default_factory=list)  # where ways through the script end early (`exit 1`)
    runs_commands: bool = False  # False: only assignments (an argument file such as megatron_lm_args.txt)


def sbatch_lines(text: str) -> list[str]:
    """The ``#SBATCH`` options of a batch script: those before its first command, as sbatch reads them."""
    out: list[str] = []
    for row in text.splitlines():
        row = row.strip()
        if row.startswith("#SBATCH"):
            out.append(row[len("#SBATCH"):].strip())
        elif row and not row.startswith("#"):
            break
    return out
