"""The one table between mtk's spec, megatron-core's arguments and Megatron-LM's command-line flags.

Each :class:`Flag` row is one Megatron-LM flag and says everything mtk does with it: which spec field it is (or
that mtk sets it itself, from what), how it is written (``written``: recorded in the checkpoint's ``args``
Namespace, written into ``megatron_lm_args.txt``, both or neither), when it applies (``only``, ``needs``) and
which megatron-core arguments it becomes, with the value they take from the job and the run's device plan
(``core``, ``resolve``, ``to_core``). :data:`DERIVED` holds the few megatron-core arguments Megatron-LM derives
in its own code rather than from a flag of their own (the parameter dtype from ``--bf16``).

Everything that speaks Megatron's names reads the table and types none of them: the engine builds its
TransformerConfig / OptimizerConfig / DDP config, LR scheduler, GPTModel, layer spec and process groups from
:func:`core_kwargs`; the checkpoint's ``args`` and ``megatron_lm_args.txt`` come from :func:`args_values` and
:func:`pretrain_argv`; the pre-submit check names the spec field of a megatron-core message with
:func:`names_to_fields`; ``mtk import`` reads a command back through :data:`TABLE` and :func:`absent_values`; a key
typed in Megatron's words gets its mtk field suggested (:func:`suggestion`); ``docs/megatron-lm-flags.md`` is
rendered from it (:func:`reference_markdown`; a test keeps the file equal, another holds every flag and default
against Megatron-LM's own parser). Plain data: no torch, no pydantic at import.
"""

from __future__ import annotations

from .mapping import (
    absent_values,
    applies,
    args_values,
    argv_from_args,
    core_kwargs,
    dtype_name,
    lookup,
    names_to_fields,
    pretrain_argv,
    record_schedule,
    recorded_name,
    rows,
    suggestion,
)
from .reference import reference_markdown, show
from .row import (
    CALCULATOR,
    DDP,
    GPT,
    GROUPS,
    LOCAL_SPEC,
    OC,
    SCHEDULER,
    SET,
    TARGETS,
    TC,
    TE_SPEC,
    Derived,
    Flag,
    Form,
    Needs,
    Written,
    get,
    spec_default,
    spec_value,
)
from .table import BY_NAME, CHECKPOINT_FORMAT, DERIVED, FLAGS, PRECISION_DTYPE, SET_BY_MTK, SPEC_ONLY, TABLE

__all__ = [
    "BY_NAME", "CALCULATOR", "CHECKPOINT_FORMAT", "DDP", "DERIVED", "FLAGS", "GPT", "GROUPS", "LOCAL_SPEC", "OC",
    "PRECISION_DTYPE", "SCHEDULER", "SET", "SET_BY_MTK", "SPEC_ONLY", "TABLE", "TARGETS", "TC", "TE_SPEC",
    "Derived", "Flag", "Form", "Needs", "Written", "absent_values", "applies", "args_values", "argv_from_args",
    "core_kwargs", "dtype_name", "get", "lookup", "names_to_fields", "pretrain_argv", "record_schedule",
    "recorded_name", "reference_markdown", "rows", "show", "spec_default", "spec_value", "suggestion",
]
