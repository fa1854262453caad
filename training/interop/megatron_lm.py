"""The parts of a checkpoint that Megatron-LM's ``megatron/training/checkpointing.py`` reads besides tensors.

An mtk checkpoint is a Megatron-LM checkpoint: the same ``torch_dist`` tensors plus, in the common state,

* ``args`` — an ``argparse.Namespace`` with the model/parallel/optimizer fields Megatron-LM compares on
  resume (``check_checkpoint_args``), copies with ``--use-checkpoint-args`` and reads for the data position
  (``consumed_train_samples``);
* ``checkpoint_version`` 3.0, ``iteration``, ``num_floating_point_operations_so_far``;
* ``rng_state`` as Megatron-LM's list (one entry per data-parallel rank) of dicts with
  ``random_rng_state``/``np_rng_state``/``torch_rng_state``/``cuda_rng_state``/``rng_tracker_states``;
* ``rerun_state_machine`` and the ``content_metadata`` (the sharded-state-dict options the optimizer keys
  were built with: dist-opt sharding type, ``chained_optim_avoid_prefix``, ``singleton_local_shards``).

mtk's own values that Megatron-LM has no field for live under the ``mtk`` key of the common state.
The reverse direction (reading a checkpoint written by Megatron-LM) uses the same names.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mtk import megatron_flags

from ..checkpoint_layout import MTK_KEY

if TYPE_CHECKING:
    from mtk.spec import Job

CHECKPOINT_VERSION = 3.0
# Megatron-LM's default (``_build_sharded_state_dict_metadata`` without --dist-ckpt-optim-fully-reshardable).
DISTOPT_SHARDING = "dp_reshardable"
# With --dist-ckpt-optim-fully-reshardable: model-space tensors, loadable at any tp/pp/dp.
DISTOPT_SHARDING_RESHARDABLE = "fully_reshardable"


def content_metadata(distributed_optimizer: bool, fully_reshardable: bool = False) -> dict[str, Any]:
    """The sharded-state-dict options, as Megatron-LM records them (without the runtime process group)."""
    meta: dict[str, Any] = {}
    if distributed_optimizer:
        meta["distrib_optim_sharding_type"] = DISTOPT_SHARDING_RESHARDABLE if fully_reshardable else DISTOPT_SHARDING
        if fully_reshardable:
            meta["distrib_optim_fully_reshardable_mem_efficient"] = False
    meta["singleton_local_shards"] = False
    meta["chained_optim_avoid_prefix"] = True
    return meta


def runtime_metadata(saved: dict[str, Any] | None) -> dict[str, Any]:
    """Content metadata plus the data-parallel group megatron-core's state-dict builders expect."""
    from megatron.core import parallel_state as ps

    return {**(saved or {}), "dp_cp_group": ps.get_data_parallel_group(with_context_parallel=True)}


def recorded_vocab_size(args: Any) -> int | None:
    """The vocabulary a checkpoint's model was built with, from its ``args``; None when it does not say, or
    when its ``vocab_size`` does not pad to its ``padded_vocab_size`` (mtk before the vocabulary fix recorded
    the spec's ``model.vocab_size`` while the model was built from the tokenizer's vocabulary)."""
    from mtk.vocabulary import padded_vocab

    vocab, padded = getattr(args, "vocab_size", None), getattr(args, "padded_vocab_size", None)
    if vocab is None or padded is None:
        return None
    divisible = int(getattr(args, "make_vocab_size_divisible_by", None) or 128)
    tp = int(getattr(args, "tensor_model_parallel_size", None) or 1)
    return int(vocab) if padded_vocab(int(vocab), divisible, tp) == int(padded) else None


def megatron_args(job: Job, *, data_parallel_size: int, vocab_size: int, padded_vocab_size: int,
                  consumed_train_samples: int, iteration: int) -> argparse.Namespace:
    """The ``args`` Namespace Megatron-LM stores in (and checks against) a checkpoint, from the job spec.

    Every field named after a Megatron-LM argument comes from the flag table (:func:`megatron_flags.args_values`);
    the rest is the checkpoint's state: the padded vocabulary, the sizes of this run and its data position.
    ``vocab_size``/``padded_vocab_size`` are the vocabulary the model was *built* with (the tokenizer's, or
    ``model.vocab_size`` for mock data), never the spec's default: the resume check, reshard, ``init_from``,
    export and Megatron-LM's ``--use-checkpoint-args`` all read them back.
    """
    return argparse.Namespace(
        **megatron_flags.args_values(job, runtime={"vocab_size": vocab_size, "padded_vocab_size": padded_vocab_size}),
        world_size=job.cluster.world_size,
        data_parallel_size=data_parallel_size, use_dist_ckpt=True,
        iteration=iteration, consumed_train_samples=consumed_train_samples, skipped_train_samples=0,
        consumed_valid_samples=0,
    )


def _philox(seed: int):
    """A CUDA generator state (Philox: 8-byte seed, 8-byte offset) at offset 0."""
    import torch

    return torch.tensor([seed & (2**63 - 1), 0], dtype=torch.int64).view(torch.uint8).clone()


def _cpu_tracker_states(seed: int) -> dict[str, Any]:
    """The CUDA RNG streams ``model_parallel_cuda_manual_seed(seed)`` would start on a GPU for this rank.

    On CPU megatron-core's tracker holds no streams (and ignores ``set_states``), but Megatron-LM's loader
    refuses an empty ``rng_tracker_states``; a GPU run resuming this checkpoint starts the same streams a
    fresh GPU run with this seed would."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mrandom

    tp = ps.get_tensor_model_parallel_rank()
    ep, etp = ps.get_expert_model_parallel_rank(), ps.get_expert_tensor_parallel_rank()
    return {mrandom._DATA_PARALLEL_RNG_TRACKER_NAME: _philox(seed),
            mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME: _philox(seed + 2718 + tp),
            mrandom._EXPERT_PARALLEL_RNG_TRACKER_NAME: _philox(seed + 1024 + 100 * ep + etp)}


def rng_state_list() -> list[dict[str, Any]]:
    """This rank's RNG streams in Megatron-LM's format (a one-element list: no data-parallel random init).

    Without CUDA there is no CUDA generator: ``cuda_rng_state`` and the tracker streams then hold the
    states a GPU run seeded like this one starts from (see :func:`_cpu_tracker_states`)."""
    import random

    import numpy as np
    import torch
    from megatron.core import tensor_parallel

    tracker = tensor_parallel.get_cuda_rng_tracker().get_states()
    if torch.cuda.is_available():
        cuda_state = torch.cuda.get_rng_state()
    else:
        cuda_state = _philox(torch.initial_seed())
        tracker = tracker or _cpu_tracker_states(torch.initial_seed())
    return [{
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "cuda_rng_state": cuda_state,
        "rng_tracker_states": tracker,
    }]


def set_rng_state(state: list[dict[str, Any]] | dict[str, Any]) -> None:
    """Restore RNG streams written by :func:`rng_state_list`, by Megatron-LM, or mtk's earlier dict layout."""
    import random

    import numpy as np
    import torch
    from megatron.core import tensor_parallel

    if isinstance(state, dict):  # mtk's earlier layout
        state = [{"random_rng_state": state["random"], "np_rng_state": state["numpy"],
                  "torch_rng_state": state["torch"], "cuda_rng_state": state.get("cuda"),
                  "rng_tracker_states": state["tracker"]}]
    entry = state[0]
    random.setstate(entry["random_rng_state"])
    np.random.set_state(entry["np_rng_state"])
    torch.set_rng_state(entry["torch_rng_state"])
    if entry.get("cuda_rng_state") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(entry["cuda_rng_state"])
    tensor_parallel.get_cuda_rng_tracker().set_states(entry["rng_tracker_states"])


def rerun_state() -> dict[str, Any] | None:
    """megatron-core's rerun-state-machine entry, as Megatron-LM writes it (a template when idle)."""
    from megatron.core.rerun_state_machine import get_rerun_state_machine

    return get_rerun_state_machine().state_dict(data_iterator=None, ckpt_format=megatron_flags.CHECKPOINT_FORMAT,
                                                force=True)


def saved_topology(common: dict[str, Any]) -> dict[str, int]:
    """The layout a checkpoint was written with: mtk's record, else derived from Megatron-LM's args."""
    extras = common.get(MTK_KEY) or {}
    if "topology" in extras:
        return dict(extras["topology"])
    if "topology" in common:  # mtk's earlier top-level layout
        return dict(common["topology"])
    args = common.get("args")
    if args is None:
        return {}
    experts = getattr(args, "num_experts", None)
    return {"tp": getattr(args, "tensor_model_parallel_size", 1),
            "pp": getattr(args, "pipeline_model_parallel_size", 1),
            "cp": getattr(args, "context_parallel_size", 1),
            "ep": getattr(args, "expert_model_parallel_size", 1) if experts else 1,
            "world": getattr(args, "world_size", 0),
            "distributed_optimizer": int(bool(getattr(args, "use_distributed_optimizer", False)))}


def saved_precision(common: dict[str, Any]) -> str | None:
    extras = common.get(MTK_KEY) or {}
    if "precision" in extras:
        return extras["precision"]
    if "precision" in common:
        return common["precision"]
    args = common.get("args")
    if args is None:
        return None
    return "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"


def consumed_samples(common: dict[str, Any]) -> int:
    """The training data position: Megatron-LM's ``args.consumed_train_samples`` (mtk's earlier key else)."""
    args = common.get("args")
    if args is not None and getattr(args, "consumed_train_samples", None) is not None:
        return int(args.consumed_train_samples)
    if "consumed_samples" in common:
        return int(common["consumed_samples"])
    return 0


# --------------------------------------------------------------------------- the pretrain_gpt.py command

ARGS_FILE = "megatron_lm_args.txt"
ARGS_ARRAY = "MEGATRON_LM_ARGS"


def pretrain_gpt_argv(args: argparse.Namespace, job: Job, checkpoint_root: str) -> list[str]:
    """The ``pretrain_gpt.py`` arguments that continue the run whose checkpoint records ``args``.

    The flag table writes them (:func:`megatron_flags.pretrain_argv`): the model, layout, schedule and optimizer
    from the checkpoint's own ``args`` (what Megatron-LM's loader compares its flags with, so every flag
    ``check_checkpoint_args`` reads agrees — RoPE runs get ``--no-position-embedding``, because mtk records
    ``add_position_embedding=False`` as Megatron-LM's ``--no-position-embedding`` runs do and Megatron-LM's default
    is True); the recipe, recompute, evaluation, data and tokenizer files from the job and the device plan it
    trained with; the checkpoint directory and the data's prefixes from here. No override flag
    (``--override-opt-param-scheduler``, ``--no-load-optim``, ``--no-load-rng``, ``--finetune``)."""
    from mtk.training import data
    from mtk.training.device_plan import plan

    prefixes, weights = data.blend(job)
    runtime: dict[str, Any] = {"checkpoint_root": checkpoint_root, "mock": not prefixes,
                               "blend": None, "split": None, "cache_dir": None}
    if prefixes:
        runtime.update(blend=[x for pair in zip(weights, prefixes, strict=True) for x in pair],
                       split=data.effective_split(job, data.split_sizes(job)), cache_dir=data.cache_dir(job))
    device = plan(job, gpu=job.cluster.device == "gpu", te=False)  # the recipe numerics this run resolved
    return megatron_flags.pretrain_argv(args, job, device, runtime)


ATTENTION_NOTES = {
    "sdpa": "# mtk computed core attention with torch SDPA; Megatron-LM has no SDPA path: its Transformer Engine "
            "spec (default) or\n#   --transformer-impl local (megatron-core's unfused attention) continues it "
            "with the same math; core attention\n#   holds no parameters, so the checkpoint is the same.",
    "unfused": "# mtk computed core attention with megatron-core's unfused DotProductAttention, as Megatron-LM's "
               "--transformer-impl local\n#   does; its default Transformer Engine spec continues it too (core "
               "attention holds no parameters).",
}


def args_file_text(argv: list[str], iteration: int, job: Job, attention: str | None = None) -> str:
    """A bash array holding ``argv`` (every value shell-quoted), with how to use it; ``attention`` (the device
    plan's core attention) adds a line on what Megatron-LM's command computes it with."""
    import shlex

    lines = [f"# Megatron-LM pretrain_gpt.py arguments that continue mtk run {job.name!r} from this checkpoint "
             f"(iteration {iteration})",
             f"# at world size {job.cluster.world_size} (tp × pp × cp × dp), with Megatron-LM core_r0.19.0:",
             f'#   . {ARGS_FILE} && torchrun --nnodes N --nproc-per-node G ... pretrain_gpt.py "${{{ARGS_ARRAY}[@]}}"',
             "# Written by mtk from the checkpoint's args, so Megatron-LM's checkpoint-args checks agree.",
             *([ATTENTION_NOTES[attention]] if attention in ATTENTION_NOTES else []),
             f"{ARGS_ARRAY}=("]
    i = 0
    while i < len(argv):  # one flag and its values per line
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        lines.append("  " + " ".join(shlex.quote(x) for x in argv[i:j]))
        i = j
    return "\n".join([*lines, ")"]) + "\n"
