"""A Megatron-LM launch script (or argument list) becomes an mtk spec that trains what the script trains — or the
import says, by name and line, why it cannot.

The script is read by :mod:`mtk.launcher.bash_reader` (bash's reading, nothing run); the command that runs
``pretrain_gpt.py`` is found (:mod:`.entry`: another entry point trains another model and is refused); each flag is
honoured through the one table, ignored when it does not change what trains, or refused (:mod:`.flags`,
:mod:`.flag_classes`); the launcher gives the cluster (:mod:`.cluster`). Where conditions the reader cannot decide
lead to different commands, a flag they agree on is read and one they do not is refused (or, when it does not change
what trains, ignored). Pure: text in, spec data and every flag's fate out.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..bash_reader import Script, Value, read
from . import entry
from .cluster import job_name, read_cluster
from .flag_classes import classify
from .flags import Group, Imported, agreement, groups, read_flags, required

__all__ = ["Imported", "agreement", "argument_list", "import_text"]


class NoArguments(entry.NotGpt):
    """The text holds no Megatron-LM arguments at all."""


def import_text(text: str, name: str | None = None, source: str = "script",
                args: list[str] | None = None) -> Imported:
    """Import a launch script or argument list (``source`` names it in messages and, when nothing else does, the
    spec's name; ``args``: the script's own arguments, as ``bash SCRIPT ARGS...`` would get them)."""
    script = read(text, source, args)
    trainings = entry.find(script, source)
    out = Imported(spec={})
    launcher: tuple[Value, ...] = ()
    sbatch: tuple[str, ...] = tuple(script.sbatch)
    if trainings:
        first = trainings[0]
        out.entry, out.line, sbatch = first.entry, first.command.line, first.command.sbatch
        found, launcher = _agreed(trainings, out)
        if first.command.when and len(trainings) == 1:
            out.notes.append(f"the training command (line {first.command.line}) runs when "
                             + "; ".join(first.command.when))
    else:
        found = argument_list(script, source)
    read_flags(found, out)
    world = read_cluster(launcher, sbatch, script.exports, out)
    if not any(not g.flag.text and not all(v.known for v in g.values) for g in found):
        required(out, world)  # (an unknown that may hold any flags is refused already: they may be in it)
    _name(sbatch, name, source, out)
    out.notes += list(dict.fromkeys(a for v in (*launcher, *(w for g in found for w in (g.flag, *g.values)))
                                    for a in v.assumed))
    out.notes += script.notes
    out.refused, out.ignored = _last(out.refused), _last(out.ignored)
    return out


def _last(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One entry per flag, its last (a flag given twice is read by Megatron-LM's argparse from its last)."""
    return list({flag: (flag, why) for flag, why in entries}.values())


def argument_list(script: Script, source: str) -> list[Group]:
    """No program runs pretrain_gpt.py: the text is an argument list (``--num-layers 2 ...``, or the arrays of a
    megatron_lm_args.txt) or the script's training command is out of sight (refused, saying why)."""
    for command in script.commands:
        if command.words and command.words[0].text.startswith("--"):
            return groups(command.words)
    if script.runs_commands or script.unread or script.exits:
        raise entry.no_training_command(script, source)
    words = [w for values in script.arrays.values() if values and values[0].text.startswith("--") for w in values]
    if not words:
        raise NoArguments(f"{source}: no Megatron-LM arguments found (no pretrain_gpt.py command, argument list or "
                          "array of --flags)")
    return groups(words)


def _agreed(trainings: list[entry.Training], out: Imported) -> tuple[list[Group], tuple[Value, ...]]:
    """The flags every training command agrees on; one that differs between the ways the script can go is refused
    (ignored when it does not change what trains), naming the conditions."""
    per = [{g.flag.text: g for g in groups(t.argv)} for t in trainings]
    first = groups(trainings[0].argv)
    if len(trainings) == 1:
        return first, trainings[0].launcher
    shared = set(trainings[0].command.when).intersection(*(t.command.when for t in trainings[1:]))
    differing = {c for t in trainings for c in t.command.when} - shared
    conditions = sorted({re.sub(r" (is true|is false|fails|succeeds|(does not )?match(es)? .*)$", "", c)
                         for c in differing})
    if conditions:
        ways = "the ways the script can go"
        depends = "depending on " + "; ".join(conditions[:3]) + ("; ..." if len(conditions) > 3 else "")
    else:  # no condition between them: the script runs each, one after another
        ways = "the training commands the script runs one after another (lines " + \
            ", ".join(str(t.command.line) for t in trainings) + ")"
        depends = "each a run of its own (a spec is one run: import a script with one of them)"
    names = list(dict.fromkeys(f for p in per for f in p))
    agreed = []
    for flag in names:
        seen = [tuple(p[flag].texts) if flag in p else None for p in per]
        if all(s == seen[0] for s in seen):
            agreed.append(per[0][flag]) if flag in per[0] else None
            continue
        shown = " / ".join(dict.fromkeys("absent" if s is None else (" ".join(s) or "present") for s in seen))
        cls = classify(flag) if flag else None
        target = out.ignored if cls is not None and cls.kind == "ignored" else out.refused
        target.append((flag or "an argument", f"differs between {ways} ({shown}), {depends}"))
    agreed_flags = {g.flag.text for g in agreed}
    kept = [g for g in first if g.flag.text in agreed_flags]
    launchers = {tuple(w.text for w in t.launcher) for t in trainings}
    if len(launchers) > 1:
        out.notes.append(f"the launcher differs {depends if conditions else 'between ' + ways}: the cluster's "
                         "counts are not read from it")
        return kept, ()
    return kept, trainings[0].launcher


def _name(sbatch: tuple[str, ...], name: str | None, source: str, out: Imported) -> None:
    name = name or job_name(sbatch) or os.path.splitext(os.path.basename(source))[0]
    clean = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "imported"
    spec: dict[str, Any] = {"name": clean, **out.spec}
    out.spec = spec
