"""Which resumes at a different parallel layout megatron-core's ``dist_checkpointing`` can load, decided
from a checkpoint's common state alone (no tensors, no torch, no process group).

Used twice: by the launcher once per node before torchrun starts (``launcher/ckpt_precheck.py``), and by
every rank before it loads (``training/checkpoint.py``), so a refused reshard never costs a training step.

What reshards, and why:

* model weights: always (every tensor is a ShardedTensor keyed by its global name and offsets);
* plain (non-distributed) optimizer state: always (its tensors follow the weights' sharding);
* distributed optimizer, ``fully_reshardable`` (``train.checkpoint.fully_reshardable``, Megatron-LM's
  ``--dist-ckpt-optim-fully-reshardable``) or the older ``fully_sharded_model_space``: always (state stored
  per parameter);
* distributed optimizer, ``dp_reshardable`` (the default, as in Megatron-LM) / ``dp_zero_gather_scatter``:
  only the data-parallel size may change (the state is the flat per-bucket buffers of one tp/pp/ep
  layout) — Megatron-LM refuses the same;
* expert parallelism (MoE): the weights reshard (global expert indices), the optimizer state does not
  (megatron-core keeps dense and expert parameter groups in separate optimizers whose groups do not match
  across ep), so a resume at another ``parallel.ep`` is refused; ``train.init_from`` takes the weights;
* RNG: restored only when tp and pp are unchanged (its streams are per tensor/pipeline rank); otherwise
  dropped, as Megatron-LM does ("RNG state will be ignored").

Refused: a changed model shape or vocabulary, a padded vocabulary that changes with ``parallel.tp``, switching
``parallel.distributed_optimizer`` or the precision family, another ``parallel.ep`` with optimizer state, and a
changed ``train.lr`` / ``train.min_lr`` / ``train.decoupled_lr`` / ``train.decoupled_min_lr`` with optimizer state
(:func:`check_lr_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .refusal import Refused

if TYPE_CHECKING:
    from mtk.spec import Job

RESHARDABLE_DISTOPT = ("fully_reshardable", "fully_sharded_model_space")
DP_SIZE = "the data-parallel size (cluster.nodes × cluster.procs_per_node / (parallel.tp × parallel.pp × parallel.cp))"
# Megatron-LM arg -> mtk model field, for the shape check.
SHAPE_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn",
                "num_attention_heads": "num_attention_heads", "num_query_groups": "query_groups"}


class ReshardRefused(Refused):
    """The resume cannot load this checkpoint at this job's layout; the message names the field and fix. Every rank
    decides it alike from the same checkpoint files, so each refuses together (one line, exit 2). ``spec_field``:
    the field the message starts with, where a caller lists it as a spec problem."""

    spec_field: str = ""


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    dp: int

    def describe(self) -> str:
        vpp = f" vpp={self.vpp}" if self.vpp > 1 else ""
        return f"tp={self.tp} pp={self.pp}{vpp} cp={self.cp} ep={self.ep} dp={self.dp}"


@dataclass(frozen=True)
class ReshardPlan:
    saved: Layout
    now: Layout
    distopt_sharding: str | None  # the distributed optimizer's saved layout; None for the plain optimizer
    changed: dict[str, tuple[int, int]] = field(default_factory=dict)  # spec field -> (saved, now)
    restore_rng: bool = True
    notes: tuple[str, ...] = ()  # what was derived rather than read (for the log)

    @property
    def resharding(self) -> bool:
        return bool(self.changed)

    def describe(self) -> str:
        """One log line: what changes and what is (not) carried over."""
        opt = f"distributed optimizer {self.distopt_sharding}" if self.distopt_sharding else "plain optimizer"
        rng = ("RNG state restored (tp/pp unchanged)" if self.restore_rng else
               "RNG state not restored: its streams are per tensor/pipeline rank and tp/pp changed "
               "(Megatron-LM drops it too); dropout streams restart from train.seed")
        return (f"resharding {self.saved.describe()} -> {self.now.describe()} ({opt}); weights and optimizer "
                f"state reshard; data position continues from the consumed samples; {rng}")


def _arg(common: dict[str, Any], name: str, default: Any = None) -> Any:
    return getattr(common.get("args"), name, default)


def saved_layout(common: dict[str, Any]) -> Layout:
    from .interop.megatron_lm import saved_topology

    topo = saved_topology(common)
    tp, pp, cp = int(topo.get("tp", 1)), int(topo.get("pp", 1)), int(topo.get("cp", 1))
    dp = _arg(common, "data_parallel_size") or (int(topo.get("world", 0)) // (tp * pp * cp)) or 0
    return Layout(tp=tp, pp=pp, vpp=int(_arg(common, "virtual_pipeline_model_parallel_size") or 1), cp=cp,
                  ep=int(topo.get("ep", 1)), dp=int(dp))


def job_layout(job: Job) -> Layout:
    p = job.parallel
    return Layout(tp=p.tp, pp=p.pp, vpp=p.virtual_pp or 1, cp=p.cp, ep=p.ep if job.model.moe.num_experts else 1,
                  dp=job.cluster.world_size // (p.tp * p.pp * p.cp))


def distopt_sharding(common: dict[str, Any]) -> str | None:
    """The distributed optimizer's saved layout, as Megatron-LM's loader infers it (None: plain optimizer)."""
    from .interop.megatron_lm import saved_topology

    if not saved_topology(common).get("distributed_optimizer"):
        return None
    meta = common.get("content_metadata") or {}
    if "distrib_optim_sharding_type" in meta:
        return str(meta["distrib_optim_sharding_type"])
    # Checkpoints from before content metadata (megatron-core < 0.13): Megatron-LM's fallback.
    return "fully_sharded_model_space" if _arg(common, "ckpt_fully_parallel_save", False) else "dp_zero_gather_scatter"


_FIELDS = (("tp", "parallel.tp"), ("pp", "parallel.pp"), ("vpp", "parallel.virtual_pp"), ("cp", "parallel.cp"),
           ("ep", "parallel.ep"), ("dp", DP_SIZE))


def _changes(saved: Layout, now: Layout) -> dict[str, tuple[int, int]]:
    changed = {}
    for attr, name in _FIELDS:
        a, b = getattr(saved, attr), getattr(now, attr)
        if attr == "dp" and not a:
            continue  # not recorded
        if a != b:
            changed[name] = (a, b)
    return changed


def shape_mismatch(args: Any, model: Any) -> tuple[str, str, Any, Any] | None:
    """The first (Megatron-LM arg, model field, saved, ours) where a checkpoint's args and ``model`` differ."""
    for arg, attr in SHAPE_FIELDS.items():
        saved, ours = getattr(args, arg, None), getattr(model, attr)
        if arg == "num_query_groups" and not getattr(args, "group_query_attention", False):
            saved = getattr(args, "num_attention_heads", None)  # Megatron-LM's value is unused without GQA
        if saved is not None and saved != ours:
            return arg, attr, saved, ours
    return None


def job_vocab_size(job: Job) -> int | None:
    """The vocabulary ``job``'s model is built with when the spec alone says (mock data / NullTokenizer:
    ``model.vocab_size``); None when it is the tokenizer's, which only the tokenizer files can tell."""
    return job.model.vocab_size if job.data.tokenizer.type == "NullTokenizer" else None


def _vocab_field(job: Job) -> str:
    return "model.vocab_size" if job.data.tokenizer.type == "NullTokenizer" else "data.tokenizer"


def saved_vocab(args: Any, built: int | None) -> tuple[int | None, str | None]:
    """(the vocabulary the checkpoint's model was built with, a note for the log) from its ``args``.

    A checkpoint whose ``vocab_size`` does not pad to its ``padded_vocab_size`` was written by mtk before the
    vocabulary fix (it recorded the spec's ``model.vocab_size`` while the model used the tokenizer's): when
    this job's vocabulary ``built`` pads to the checkpoint's rows at its tp, that is the one it was built
    with, and the note says so. None: the checkpoint does not tell."""
    from mtk.vocabulary import padded_vocab

    from .interop.megatron_lm import recorded_vocab_size

    recorded = recorded_vocab_size(args)
    if recorded is not None:
        return recorded, None
    vocab, padded = getattr(args, "vocab_size", None), getattr(args, "padded_vocab_size", None)
    if vocab is None or padded is None or built is None:
        return None, None
    divisible = int(getattr(args, "make_vocab_size_divisible_by", None) or 128)
    tp = int(getattr(args, "tensor_model_parallel_size", None) or 1)
    if padded_vocab(built, divisible, tp) != int(padded):
        return None, None
    return built, (f"the checkpoint records vocab_size={vocab}, which does not pad to its {padded} embedding rows "
                   f"(written by an mtk that recorded model.vocab_size instead of the tokenizer's vocabulary); "
                   f"taking this job's tokenizer vocabulary ({built}), which does — the next save records it")


def check_model_shape(common: dict[str, Any], job: Job, where: str, vocab_size: int | None = None) -> list[str]:
    """Refuse a checkpoint whose model shape differs from ``job.model`` (naming the model field); return notes
    for the log. ``vocab_size``: the vocabulary this job's model is built with (its tokenizer's); default:
    ``model.vocab_size`` for mock data, otherwise unknown (then only the padded rows are compared)."""
    from mtk.vocabulary import padded_vocab

    args = common.get("args")
    if args is None:
        return []
    if mismatch := shape_mismatch(args, job.model):
        arg, attr, saved, ours = mismatch
        raise ReshardRefused(f"model.{attr}: {where} has {arg}={saved} but this job has model.{attr}={ours}; "
                             "a resume keeps the model's shape — set it back, or start a new run from the "
                             "weights of a matching model with train.init_from")
    built = vocab_size if vocab_size is not None else job_vocab_size(job)
    vocab, note = saved_vocab(args, built)
    notes = [note] if note else []
    if vocab is not None and built is not None and vocab != built:
        raise ReshardRefused(
            f"{_vocab_field(job)}: {where} was trained with a vocabulary of {vocab} tokens but this job's "
            f"{'model.vocab_size' if _vocab_field(job) == 'model.vocab_size' else 'tokenizer'} has {built}; a "
            "resume keeps the vocabulary — use the tokenizer (or model.vocab_size) the run was trained with, or "
            "give the new vocabulary its own run name")
    saved_padded = getattr(args, "padded_vocab_size", None)
    m, tp = job.model, job.parallel.tp
    if saved_padded is None or built is None:
        return notes
    ours = padded_vocab(built, m.make_vocab_size_divisible_by, tp)
    if ours != saved_padded:
        saved_tp = getattr(args, "tensor_model_parallel_size", tp)
        d = _divisor_for(built, saved_padded, tp)
        hint = f" (model.make_vocab_size_divisible_by={d} does)" if d else ""
        raise ReshardRefused(
            f"parallel.tp: {where} pads the vocabulary ({built}) to {saved_padded} rows (written at tp={saved_tp}) "
            f"but this job pads it to {ours} (model.make_vocab_size_divisible_by={m.make_vocab_size_divisible_by} "
            f"× parallel.tp={tp}), so the embedding cannot reshard; choose model.make_vocab_size_divisible_by so "
            f"that the padding stays {saved_padded}{hint}, or keep parallel.tp={saved_tp}")
    return notes


def _divisor_for(vocab: int, padded: int, tp: int) -> int | None:
    """The largest power-of-two ``d`` with ``padded_vocab(vocab, d, tp) == padded``, if any."""
    from mtk.vocabulary import padded_vocab

    return next((d for d in (2**k for k in range(16, -1, -1)) if padded_vocab(vocab, d, tp) == padded), None)


def plan(common: dict[str, Any], job: Job, where: str, optimizer_state: bool = True,
         vocab_size: int | None = None) -> ReshardPlan:
    """Check that this job can resume ``common``'s checkpoint and say what is carried over; raises
    ReshardRefused (naming the spec field and the fix) where megatron-core cannot load it.

    ``optimizer_state=False``: the checkpoint holds weights only (a ``release`` dir, --no-save-optim), so
    only the model's rules apply. ``vocab_size``: the vocabulary this job's model is built with (its
    tokenizer's; see :func:`check_model_shape`)."""
    from .interop.megatron_lm import saved_precision, saved_topology

    saved, now = saved_layout(common), job_layout(job)
    changed = _changes(saved, now)
    notes = check_model_shape(common, job, where, vocab_size)
    sharding = distopt_sharding(common) if optimizer_state else None
    moe = bool(job.model.moe.num_experts)
    if optimizer_state:
        topo = saved_topology(common)
        distopt = job.parallel.distributed_optimizer
        if "distributed_optimizer" in topo and bool(topo["distributed_optimizer"]) != distopt:
            raise ReshardRefused(
                f"parallel.distributed_optimizer: {where} was saved with parallel.distributed_optimizer="
                f"{bool(topo['distributed_optimizer'])} (the optimizer state layouts differ); resume with the same "
                f"setting, or start a new run from its weights with train.init_from")
        check_lr_groups(common, job, where)
        precision = saved_precision(common) or job.train.precision
        if (precision == "fp32") != (job.train.precision == "fp32"):
            raise ReshardRefused(
                f"train.precision: {where} was saved with train.precision={precision}; resuming at "
                f"{job.train.precision} changes the optimizer state layout (fp32 master weights); keep the precision "
                "family (bf16/fp16/fp8 vs fp32), or start a new run from its weights with train.init_from")
        if sharding is not None and sharding not in RESHARDABLE_DISTOPT:
            fixed = [name for name in ("parallel.tp", "parallel.pp", "parallel.virtual_pp", "parallel.ep")
                     if name in changed]
            if fixed:
                name = fixed[0]
                a, b = changed[name]
                raise ReshardRefused(
                    f"{name}: {where} holds distributed-optimizer state in the {sharding} layout, which reshards "
                    f"only over data-parallel ranks; it was written at {name}={a} and this job has {name}={b}. "
                    f"To reshard it, resume once at {name}={a} with train.checkpoint.fully_reshardable=true and "
                    f"save (Megatron-LM: --dist-ckpt-optim-fully-reshardable), then change {name}; or start a new "
                    "run from its weights with train.init_from")
    if "parallel.ep" in changed and not moe:
        changed.pop("parallel.ep")  # ep is meaningless without experts
    if optimizer_state and "parallel.ep" in changed:
        a, b = changed["parallel.ep"]
        raise ReshardRefused(
            f"parallel.ep: {where} was written at parallel.ep={a} and this job has parallel.ep={b}; the optimizer "
            "state of an MoE run is split into one optimizer per expert-parallel layout (dense and expert "
            "parameter groups), which megatron-core 0.19 cannot map onto another ep. Resume at "
            f"parallel.ep={a}, or start a new run from its weights with train.init_from")
    restore_rng = "parallel.tp" not in changed and "parallel.pp" not in changed
    return ReshardPlan(saved=saved, now=now, distopt_sharding=sharding, changed=changed, restore_rng=restore_rng,
                       notes=tuple(notes))


def _lr_pairs(groups: Any) -> list[tuple[float, float]]:
    """The (max_lr, min_lr) of each saved optimizer param group, in order, without repeats."""
    pairs: list[tuple[float, float]] = []
    for group in groups if isinstance(groups, list | tuple) else []:
        if isinstance(group, dict) and group.get("max_lr") is not None:
            pair = (float(group["max_lr"]), float(group.get("min_lr") or 0.0))
            if pair not in pairs:
                pairs.append(pair)
    return pairs


def saved_lr_pairs(common: dict[str, Any]) -> list[tuple[float, float]]:
    """(max_lr, min_lr) of the checkpoint's optimizer param groups (its common state, no tensors); [] if none."""
    optimizer = common.get("optimizer")
    if isinstance(optimizer, list | tuple):  # one state per model chunk / optimizer (virtual pp, MoE)
        return [p for o in optimizer if isinstance(o, dict) for p in _lr_pairs(o.get("param_groups"))]
    return _lr_pairs(optimizer.get("param_groups")) if isinstance(optimizer, dict) else []


def _num(value: float | None) -> str:
    return "unset" if value is None else f"{value:g}"


def check_lr_groups(common: dict[str, Any], job: Job, where: str) -> None:
    """Refuse a resume whose learning rates differ from those the checkpoint's optimizer was saved with.

    megatron-core keys each optimizer param group by its settings, ``max_lr`` and ``min_lr`` among them
    (``param_group_identifier_keys``), and looks the saved groups up by that key: with another ``train.lr``,
    ``train.min_lr`` or ``train.decoupled_lr`` / ``decoupled_min_lr`` the load fails on every rank ("Could not find
    parameter group with key ... in loaded checkpoint"). Named here instead, with the checkpoint's value and the
    two ways on: resume with the checkpoint's LR (``train.lr_schedule_on_resume`` then decides whether its schedule
    is kept or re-planned to ``train.iterations``), or start a new run from its weights (``train.init_from``), whose
    optimizer starts afresh at any LR. Silent when the checkpoint records no param groups (weights only)."""
    saved = saved_lr_pairs(common)
    if not saved:
        return
    t = job.train
    base = (_arg(common, "lr"), _arg(common, "min_lr"))
    if base not in saved or None in base:
        base = saved[0]  # the first group is a default one (megatron-core builds those first)
    saved_base = (float(base[0]), float(base[1]))
    extra = [p for p in saved if p != saved_base]
    want_extra = []
    if t.decoupled_lr is not None:
        pair = (t.decoupled_lr, t.decoupled_min_lr if t.decoupled_min_lr is not None else t.min_lr)
        if pair != (t.lr, t.min_lr):
            want_extra.append(pair)
    for name, have, ours in (("train.lr", saved_base[0], t.lr), ("train.min_lr", saved_base[1], t.min_lr)):
        if have != ours:
            raise _lr_refusal(name, have, ours, where)
    if sorted(extra) == sorted(want_extra):
        return
    have_pair, ours_pair = (extra[0] if extra else None), (want_extra[0] if want_extra else None)
    name, index = "train.decoupled_lr", 0
    if have_pair and ours_pair and have_pair[0] == ours_pair[0]:
        name, index = "train.decoupled_min_lr", 1
    raise _lr_refusal(name, have_pair[index] if have_pair else None, getattr(t, name.split(".")[1]), where)


def _lr_refusal(name: str, have: float | None, ours: float | None, where: str) -> ReshardRefused:
    keep = f"{name} unset" if have is None else f"{name}={_num(have)}"
    exc = ReshardRefused(
        f"{name}: {where} was saved with {name}={_num(have)} but this job has {name}={_num(ours)}; megatron-core "
        "keys the optimizer's param groups by their learning rates, so its state cannot be loaded under another. "
        f"Resume with {keep} (train.lr_schedule_on_resume then keeps the checkpoint's schedule or re-plans it to "
        "this spec's iterations), or start a new run from its weights with train.init_from (a fresh "
        "optimizer, any LR)")
    exc.spec_field = name
    return exc
