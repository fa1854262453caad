"""What reads the table: the engine's megatron-core arguments, the checkpoint's args and the pretrain_gpt.py command
line, the schedule a resume records, Megatron-LM's defaults for an import, and Megatron's words back to spec fields."""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .row import SCHEDULER, Flag, data_get, holds, spec_value
from .table import BY_NAME, DERIVED, FLAGS, PRECISION_DTYPE


def rows(written: str | None = None) -> list[Flag]:
    return [f for f in FLAGS if written is None or f.written == written]


def applies(flag: Flag, job: Any, plan: Any = None) -> bool:
    """Whether the row applies to this job: its guard row (``only``) is on and its ``needs`` hold."""
    if flag.only and not BY_NAME[flag.only].resolved(job, plan):
        return False
    return holds(flag.needs, job)


# --------------------------------------------------------------------------- megatron-core


def core_kwargs(job: Any, target: str, plan: Any = None, convert: Mapping[str, Callable[[Any], Any]] | None = None,
                sections: Collection[str] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``target`` (one of :data:`TARGETS`) that the job and its device plan set: every
    applying row whose ``core`` names an argument of ``target``, and the :data:`DERIVED` ones (their ``kind``
    converted by ``convert``, e.g. ``{"dtype": torch dtype by name}``). Without ``plan`` the rows the device plan
    decides are left out; ``sections`` keeps the rows about those spec sections (the pre-submit check builds the
    layout's process groups without the run's timeout). Two rows setting one argument is a table error, raised."""
    out: dict[str, Any] = {}

    def put(argument: str, value: Any, who: str) -> None:
        if argument in out:
            raise ValueError(f"megatron_flags: {target}.{argument} is set by two rows ({who} and another)")
        out[argument] = value

    for flag in FLAGS:
        arguments = [t.partition(".")[2] for t in flag.core if t.partition(".")[0] == target]
        if not arguments or (flag.resolve is not None and plan is None) or not applies(flag, job, plan) or \
                not _in(flag.field, sections):
            continue
        value = flag.core_value(job, plan)
        for argument in arguments:
            put(argument, value, flag.flag)
    for derived in DERIVED:
        value = derived.value(job)
        if derived.kind and convert is not None:
            value = convert[derived.kind](value)
        for t in derived.core:
            if t.partition(".")[0] == target and _in(derived.field, sections):
                put(t.partition(".")[2], value, derived.why)
    return out


def _in(field: str, sections: Collection[str] | None) -> bool:
    """Whether a spec field is in one of ``sections`` (None: every field)."""
    return sections is None or any(field == s or field.startswith(s + ".") for s in sections)


def dtype_name(precision: str) -> str:
    """The torch dtype (by name) of a precision's parameters."""
    return PRECISION_DTYPE.get(precision, "float32")


# --------------------------------------------------------------------------- Megatron-LM's args and command line


def recorded_name(spec: str) -> str:
    """The name a checkpoint's args record a spec field under (``model.norm_epsilon`` → ``layernorm_epsilon``)."""
    return next(f.name for f in FLAGS if f.spec == spec and f.written in ("args", "record"))


def args_values(job: Any, runtime: Mapping[str, Any] | None = None, sections: Collection[str] | None = None
                ) -> dict[str, Any]:
    """The checkpoint ``args`` fields the table records (``written`` args or record), by Megatron-LM's names
    (``aliases`` too); ``runtime`` gives the values only the run knows (the built ``vocab_size``), ``sections`` keeps
    the rows whose spec field starts with one of them (a converted model records its model and layout only)."""
    out: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.written not in ("args", "record"):
            continue
        if not _in(flag.field, sections):
            continue
        value = flag.resolved(job, None, runtime)
        for name in (flag.name, *flag.aliases):
            out[name] = value
    return out


def _words(flag: Flag, value: Any) -> list[str]:
    if flag.form == "value":
        if value is None:
            return []
        return [flag.flag, *map(str, value)] if isinstance(value, list | tuple) else [flag.flag, str(value)]
    return [flag.flag] if bool(value) == (flag.form != "false") else []


def argv_from_args(args: Any, job: Any = None) -> list[str]:
    """The Megatron-LM flags for a checkpoint's args Namespace (the ``args`` rows, in table order): a value row when
    the Namespace holds one, a flag-only row when its field says so; guarded rows when ``only`` holds (and, given
    the job, ``needs``)."""
    return [word for flag in rows("args") if _recorded_applies(flag, args, job)
            for word in _words(flag, getattr(args, flag.name))]


def _recorded_applies(flag: Flag, args: Any, job: Any) -> bool:
    """An ``args`` row is written when the Namespace records it, its guard field there is on and (given the job) its
    ``needs`` hold."""
    return hasattr(args, flag.name) and not (flag.only and not getattr(args, flag.only, None)) and \
        (job is None or holds(flag.needs, job))


def pretrain_argv(args: Any, job: Any, plan: Any, runtime: Mapping[str, Any]) -> list[str]:
    """The whole ``pretrain_gpt.py`` command line that continues a run, in table order: the ``args`` rows from the
    checkpoint's own args (what Megatron-LM's loader compares its flags with), the ``job`` rows from the job, its
    device plan and ``runtime`` (``checkpoint_root``, the data's ``blend``/``split``/``cache_dir``/``mock``)."""
    out: list[str] = []
    for flag in FLAGS:
        if flag.written == "args" and _recorded_applies(flag, args, job):
            out += _words(flag, getattr(args, flag.name))
        elif flag.written == "job" and applies(flag, job, plan):
            out += _words(flag, flag.resolved(job, plan, runtime))
    return out


def record_schedule(args: Any, scheduler: Any, gbs: int) -> None:
    """Make a checkpoint's ``args`` name the LR schedule ``scheduler`` (megatron-core's OptimizerParamScheduler)
    follows — the scheduler → args direction of the ``args`` rows that reach it, samples back to iterations."""
    for flag in rows("args"):
        arguments = [t.partition(".")[2] for t in flag.core if t.partition(".")[0] == SCHEDULER]
        if not arguments or not hasattr(args, flag.name):
            continue
        value = getattr(scheduler, arguments[0]) if flag.from_schedule is None else \
            flag.from_schedule(scheduler, gbs, args)
        setattr(args, flag.name, value)


# --------------------------------------------------------------------------- reading Megatron's words back


def absent_values(spec: dict[str, Any], given: Collection[str]) -> dict[str, Any]:
    """For ``mtk import``: Megatron-LM's value of each spec field a command leaves out, where mtk's default differs
    (``absent``) and the row applies to the spec as imported so far (``only``, ``needs``, ``absent_needs``; read
    in table order, each value seen by the rows after it). ``spec``: the imported spec data; ``given``: the flags
    the command gave (a field any of whose flags is given keeps the command's value). ``{spec field: value}``."""
    work = copy.deepcopy(spec)
    out: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.absent is None or not flag.spec or any(f.flag in given for f in FLAGS if f.spec == flag.spec):
            continue
        if data_get(work, flag.spec) is not None:
            continue
        if flag.only and not spec_value(work, BY_NAME[flag.only].field):
            continue
        if not (holds(flag.needs, work) and holds(flag.absent_needs, work)):
            continue
        node = work
        *parents, last = flag.spec.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = out[flag.spec] = flag.absent
    return out


def _key(text: str) -> str:
    return text.strip().lstrip("-").replace("-", "_").lower()


def _names(flag: Flag) -> set[str]:
    return {_key(flag.flag), flag.name, *flag.aliases, *(c.partition(".")[2] for c in flag.core)}


def lookup(name: str) -> Flag | None:
    """The row a name in Megatron's words means: a flag (``--tensor-model-parallel-size``), its argparse attribute
    (``tensor_model_parallel_size``) or a megatron-core argument; rows with a spec field first."""
    key = _key(name)
    found = [f for f in FLAGS if key in _names(f)]
    found.sort(key=lambda f: not f.spec)
    return found[0] if found else None


def names_to_fields(job: Any = None) -> dict[str, str]:
    """Megatron's names a megatron-core message may use — every argument the table's rows and derived values reach,
    and the multi-word argparse attributes — each with the spec field it is about. Where several rows share a name,
    one that applies to ``job`` wins, then one with its own spec field (``lr_warmup_steps``: the warmup fraction
    when the job sets it)."""
    candidates: dict[str, list[tuple[tuple[bool, bool], str]]] = {}
    for flag in FLAGS:
        if not flag.field:
            continue
        rank = (job is not None and not applies(flag, job), not flag.spec)
        names = {c.partition(".")[2] for c in flag.core} | {n for n in (flag.name, *flag.aliases) if "_" in n}
        for name in names:
            candidates.setdefault(name, []).append((rank, flag.field))
    for derived in DERIVED:
        for t in derived.core:
            if derived.field:
                candidates.setdefault(t.partition(".")[2], []).append(((False, True), derived.field))
    return {name: min(found, key=lambda c: c[0])[1] for name, found in candidates.items()}


def suggestion(key: str) -> str:
    """``"parallel.tp (--tensor-model-parallel-size)"`` for a key typed in Megatron's words; "" otherwise."""
    flag = lookup(key.rpartition(".")[2])
    if flag is None or not flag.spec or flag.spec == key:
        return ""
    return f"{flag.spec} ({flag.flag})"

