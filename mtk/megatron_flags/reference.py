"""docs/megatron-lm-flags.md, rendered from the table."""

from __future__ import annotations

from typing import Any

from .row import SET, Flag
from .table import BY_NAME, DERIVED, FLAGS, SET_BY_MTK, SPEC_ONLY


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _written(flag: Flag) -> str:
    return {"args": "args + file", "record": "args", "job": "file", "": ""}[flag.written]


def reference_markdown() -> str:
    """docs/megatron-lm-flags.md: every row of the table (a test keeps the file equal to this)."""
    lines = [
        "# Megatron-LM flags and mtk's spec",
        "",
        "Generated from the table in `mtk/megatron_flags/table.py` by",
        "`python -m mtk.megatron_flags docs/megatron-lm-flags.md`; `tests/unit/test_megatron_flags.py` keeps this file",
        "equal to the table. The same table builds the engine's megatron-core configs, scheduler, model and process",
        "groups, records the checkpoint's Megatron-LM `args`, writes `megatron_lm_args.txt` beside each checkpoint,",
        "reads a Megatron-LM command line back (`mtk import`), names the spec field of a megatron-core refusal",
        "(`mtk validate`) and suggests the mtk field for a key typed in Megatron's words.",
        "",
        "*megatron-core*: the arguments the value reaches (config fields, and the scheduler's, GPTModel's, the layer",
        "spec's, `initialize_model_parallel`'s and the batch-size schedule's micro-batch calculator's arguments).",
        "*Written*: `args` — recorded in the checkpoint's args Namespace; `file` — written to `megatron_lm_args.txt`.",
        "*Without the flag*: the value `mtk import` gives the field when a command leaves the flag out — Megatron-LM's",
        "own default, where mtk's differs (a Megatron-LM command without `--bf16` trains in fp32).",
        "",
        "| Megatron-LM flag | mtk spec field | megatron-core | form | written | without the flag | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in FLAGS:
        form = {"value": "value", "true": "on when true", "false": "on when false",
                "when": "on when " + " or ".join(map(str, f.when))}[f.form]
        if f.spec:
            spec = f"`{f.spec}`"
        elif f.read is None and f.resolve is None and f.fixed is not None:
            spec = "set by mtk: `" + show(f.fixed) + "`"
        else:
            spec = "set by mtk" + (f" from `{f.derived_from}`" if f.derived_from else "")
        core = ", ".join(f"`{c}`" for c in f.core)
        conditions = [("when set" if BY_NAME[f.only] is f else f"only with {BY_NAME[f.only].flag}")] if f.only else []
        conditions += [f"with {path} " + ("set" if values == SET else " or ".join(map(_shown, values)))
                       for path, values in f.needs]
        note = "; ".join(x for x in (f.why, *conditions) if x)
        absent = "" if f.absent is None else f"`{show(f.absent)}`"
        lines.append(f"| `{f.flag}` | {spec} | {core} | {form} | {_written(f)} | {absent} | {_cell(note)} |")
    lines += ["", "## megatron-core arguments with no flag of their own", "",
              "Megatron-LM derives these in its own code; the engine sets them from the table too.", "",
              "| megatron-core | from | notes |", "|---|---|---|"]
    lines += [f"| {', '.join(f'`{c}`' for c in d.core)} | {f'`{d.derived_from}`' if d.derived_from else ''} | "
              f"{_cell(d.why)} |" for d in DERIVED]
    lines += ["", "## Set by mtk itself", "", "| Megatron-LM flag | what decides it |", "|---|---|"]
    lines += [f"| `{flag}` | {_cell(why)} |" for flag, why in SET_BY_MTK.items()]
    lines += ["", "Any other flag is unknown to mtk: `mtk import` lists it by name and leaves it out of the spec.", "",
              "## Spec fields with no Megatron-LM flag", "", "| mtk spec field | what it is |", "|---|---|"]
    lines += [f"| `{spec}` | {_cell(why)} |" for spec, why in SPEC_ONLY.items()]
    lines.append("")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return "unset" if value is None else show(value)


def show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)

