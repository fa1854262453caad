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

Refused: a changed model shape, a padded vocabulary that changes with ``parallel.tp``, switching
``parallel.distributed_optimizer`` or the precision family, another ``parallel.ep`` with optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtk.launcher.spec import Job

RESHARDABLE_DISTOPT = ("fully_reshardable", "fully_sharded_model_space")
DP_SIZE = "the data-parallel size (cluster.nodes × cluster.procs_per_node / (parallel.tp × parallel.pp × parallel.cp))"
# Megatron-LM arg -> mtk model field, for the shape check.
SHAPE_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn",
                "num_attention_heads": "num_attention_heads", "num_query_groups": "query_groups"}


class ReshardRefused(RuntimeError):
    """The resume cannot load this checkpoint at this job's layout; the message names the field and fix."""

    user_facing = True
    exit_code = 2


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


def check_model_shape(common: dict[str, Any], job: Job, where: str) -> None:
    """Refuse a checkpoint whose model shape differs from ``job.model`` (naming the model field)."""
    from mtk.launcher.figures import padded_vocab

    args = common.get("args")
    if args is None:
        return
    if mismatch := shape_mismatch(args, job.model):
        arg, attr, saved, ours = mismatch
        raise ReshardRefused(f"model.{attr}: {where} has {arg}={saved} but this job has model.{attr}={ours}; "
                             "a resume keeps the model's shape — set it back, or start a new run from the "
                             "weights of a matching model with train.init_from")
    saved_padded, vocab = getattr(args, "padded_vocab_size", None), getattr(args, "vocab_size", None)
    m, tp = job.model, job.parallel.tp
    if saved_padded is None or vocab is None or (m.vocab_size and m.vocab_size != vocab):
        return
    ours = padded_vocab(vocab, m.make_vocab_size_divisible_by, tp)
    if ours != saved_padded:
        saved_tp = getattr(args, "tensor_model_parallel_size", tp)
        d = _divisor_for(vocab, saved_padded, tp)
        hint = f" (model.make_vocab_size_divisible_by={d} does)" if d else ""
        raise ReshardRefused(
            f"parallel.tp: {where} pads the vocabulary ({vocab}) to {saved_padded} rows (written at tp={saved_tp}) "
            f"but this job pads it to {ours} (model.make_vocab_size_divisible_by={m.make_vocab_size_divisible_by} "
            f"× parallel.tp={tp}), so the embedding cannot reshard; choose model.make_vocab_size_divisible_by so "
            f"that the padding stays {saved_padded}{hint}, or keep parallel.tp={saved_tp}")


def _divisor_for(vocab: int, padded: int, tp: int) -> int | None:
    """The largest power-of-two ``d`` with ``padded_vocab(vocab, d, tp) == padded``, if any."""
    from mtk.launcher.figures import padded_vocab

    return next((d for d in (2**k for k in range(16, -1, -1)) if padded_vocab(vocab, d, tp) == padded), None)


def plan(common: dict[str, Any], job: Job, where: str, optimizer_state: bool = True) -> ReshardPlan:
    """Check that this job can resume ``common``'s checkpoint and say what is carried over; raises
    ReshardRefused (naming the spec field and the fix) where megatron-core cannot load it.

    ``optimizer_state=False``: the checkpoint holds weights only (a ``release`` dir, --no-save-optim), so
    only the model's rules apply."""
    from .interop.megatron_lm import saved_precision, saved_topology

    saved, now = saved_layout(common), job_layout(job)
    changed = _changes(saved, now)
    check_model_shape(common, job, where)
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
    return ReshardPlan(saved=saved, now=now, distopt_sharding=sharding, changed=changed, restore_rng=restore_rng)
