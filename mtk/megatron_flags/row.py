"""A row of the flag table: one Megatron-LM flag (:class:`Flag`) or one megatron-core argument Megatron-LM derives
in its own code (:class:`Derived`), and how a row reads the spec (``needs``, defaults of fields left out)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Form = Literal["value", "true", "false", "when"]
Written = Literal["args", "record", "job", ""]
# What a row's ``core`` targets name: megatron-core's config classes, and the constructors and functions the engine
# calls with the job's settings (``Owner.argument``).
TC, OC, DDP = "TransformerConfig", "OptimizerConfig", "DistributedDataParallelConfig"
SCHEDULER = "OptimizerParamScheduler"
GPT = "GPTModel"
LOCAL_SPEC, TE_SPEC = "get_gpt_layer_local_spec", "get_gpt_layer_with_transformer_engine_spec"
GROUPS = "initialize_model_parallel"
CALCULATOR = "StepBatchsizeNumMicroBatchesCalculator"  # megatron-core's micro-batch count under a batch schedule
TARGETS = (TC, OC, DDP, SCHEDULER, GPT, LOCAL_SPEC, TE_SPEC, GROUPS, CALCULATOR)
# ``needs`` value meaning "set to anything but None"
SET: tuple[Any, ...] = ()

Needs = tuple[tuple[str, tuple[Any, ...]], ...]


@dataclass(frozen=True)
class Flag:
    """One Megatron-LM flag.

    ``form``: ``value`` takes a value (``--lr 3e-4``); ``true`` is present when the value is true; ``false``
    when it is false (``--disable-bias-linear`` ↔ ``model.add_bias_linear: false``); ``when`` when the spec field
    holds one of ``when`` (``--bf16`` ↔ ``train.precision`` bf16 or fp8; importing it sets ``when[0]``).
    ``spec`` is the field the import sets from the flag; empty for a flag mtk sets itself: ``fixed`` is then the
    value it always uses (None with ``read``/``resolve``: derived, ``why`` says how) and ``derived_from`` the spec
    field that decides it (an error about it names that field).

    The value: ``read`` (the resolved value from the Job, when not the spec field as given); ``resolve`` (job,
    device plan → value, for what the device plan decides: fusions, overlap, an ``auto`` spec value); ``runtime``
    (the key of a value only the run knows — the built vocabulary, the checkpoint directory, the data prefixes —
    in the mapping the writer is handed).

    ``written``: ``args`` — recorded in the checkpoint's args Namespace under ``dest`` and written to
    megatron_lm_args.txt from it; ``record`` — recorded only (Megatron-LM derives it from other flags, or a
    written value would trip its checks); ``job`` — written from the job and its device plan, not recorded;
    ``""`` — neither. ``aliases``: older Megatron-LM names the value is recorded under too.

    When it applies: ``only`` names the row (by its ``dest``) whose value must be truthy (the MoE flags);
    ``needs`` spec fields that must hold one of the given values (``SET``: any value but None) — for the flag to
    be written, to reach megatron-core, and to take Megatron-LM's default on import; the args record holds it
    regardless. ``absent`` is Megatron-LM's value without the flag, where mtk's default differs (the import sets
    it where ``absent_needs`` hold too).

    ``core``: the megatron-core arguments (``Owner.argument``, owners in :data:`TARGETS`) that take the value,
    through ``to_core`` (value, job → argument) where they differ (a negation, iterations → samples);
    ``from_schedule`` (scheduler, global batch, args → value) is the way back from the LR scheduler's state, where
    it is not the argument as it stands.
    """

    flag: str
    spec: str = ""
    core: tuple[str, ...] = ()
    form: Form = "value"
    when: tuple[Any, ...] = ()
    fixed: Any = None
    read: Callable[[Any], Any] | None = None
    dest: str = ""
    written: Written = "args"
    only: str = ""
    absent: Any = None
    why: str = ""
    resolve: Callable[[Any, Any], Any] | None = None
    to_core: Callable[[Any, Any], Any] | None = None
    needs: Needs = ()
    absent_needs: Needs = ()
    runtime: str = ""
    aliases: tuple[str, ...] = ()
    derived_from: str = ""
    from_schedule: Callable[[Any, int, Any], Any] | None = None

    @property
    def name(self) -> str:
        """Megatron-LM's argparse attribute for the flag."""
        return self.dest or self.flag[2:].replace("-", "_")

    @property
    def engine(self) -> bool:
        """Whether the device plan decides the value (the engine resolves it)."""
        return self.resolve is not None

    @property
    def field(self) -> str:
        """The spec field this row is about: its own, else the one that decides it."""
        return self.spec or self.derived_from or (self.needs[0][0] if self.needs else "")

    def value(self, job: Any) -> Any:
        """The spec's value for this flag as Megatron reads it (a bool for the flag-only forms)."""
        if not self.spec:
            return self.fixed if self.read is None else self.read(job)
        raw = self.read(job) if self.read is not None else get(job, self.spec)
        if self.form == "when":
            return raw in self.when
        return raw

    def resolved(self, job: Any, plan: Any = None, runtime: Mapping[str, Any] | None = None) -> Any:
        """The value the run uses: the run's own (``runtime``), the device plan's, else the spec's."""
        if self.runtime and runtime is not None and self.runtime in runtime:
            return runtime[self.runtime]
        if self.resolve is not None and plan is not None:
            return self.resolve(job, plan)
        return self.value(job)

    def core_value(self, job: Any, plan: Any = None) -> Any:
        value = self.resolved(job, plan)
        return self.to_core(value, job) if self.to_core is not None else value


@dataclass(frozen=True)
class Derived:
    """A megatron-core argument Megatron-LM derives in its own code, not from a flag of its own. ``kind`` names a
    conversion the engine supplies (``dtype``: a torch dtype by name; ``function``: a torch.nn.functional)."""

    core: tuple[str, ...]
    value: Callable[[Any], Any]
    derived_from: str = ""
    kind: str = ""
    why: str = ""

    @property
    def field(self) -> str:
        return self.derived_from


def get(obj: Any, dotted: str) -> Any:
    """The field at ``dotted`` (None inside an unset section: ``train.fp8`` without fp8)."""
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def data_get(data: dict[str, Any], dotted: str) -> Any:
    """The field at ``dotted`` of spec data (a dict, as ``mtk import`` builds it); None when left out."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# --------------------------------------------------------------------------- when a row applies

_MISSING = object()


@functools.cache
def spec_default(dotted: str) -> Any:
    """The spec's default for the field at ``dotted`` (what a spec that leaves it out gets)."""
    from pydantic import BaseModel

    from mtk.spec.job import Job

    model: type[BaseModel] = Job
    *parents, last = dotted.split(".")
    for part in parents:
        annotation = model.model_fields[part].annotation
        model = next(a for a in (annotation, *getattr(annotation, "__args__", ()))
                     if isinstance(a, type) and issubclass(a, BaseModel))
    return model.model_fields[last].get_default(call_default_factory=True)


def spec_value(source: Any, dotted: str) -> Any:
    """The field at ``dotted`` of a Job, or of spec data (a dict, as ``mtk import`` builds it); a field left out,
    or inside an unset section (``train.fp8`` without fp8), is the spec's default."""
    node = source
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        node = node.get(part, _MISSING) if isinstance(node, dict) else getattr(node, part, _MISSING)
        if node is _MISSING or (node is None and i < len(parts) - 1):
            return spec_default(dotted)
    return node


def holds(needs: Needs, source: Any) -> bool:
    """Whether each spec field of ``needs`` holds one of its values in ``source`` (a Job or spec data)."""
    return all(spec_value(source, path) is not None if values == SET else spec_value(source, path) in values
               for path, values in needs)

