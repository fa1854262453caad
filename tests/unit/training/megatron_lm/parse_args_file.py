"""Megatron-LM's own argument parser reads mtk's megatron_lm_args.txt files (test scaffolding, one process).

``python parse_args_file.py CASES.pkl OUT.json``: CASES.pkl holds ``[(name, args file text, checkpoint args,
world size, core targets), ...]``. Per case: ``megatron.training.arguments.parse_args`` + ``validate_args`` over
the file's argv (WORLD_SIZE = the run's), then Megatron-LM's loader check ``check_checkpoint_args`` against the
checkpoint's args, and every field both Namespaces share compared; then megatron-core's configs and LR scheduler
as Megatron-LM's own code builds them from the parsed args (``core_transformer_config_from_args``,
``get_megatron_ddp_config``, ``get_megatron_optimizer_config``, ``get_optimizer_param_scheduler``), and the value
of each core target (``Owner.argument``) asked for; with a batch-size schedule, megatron-core's micro-batch calculator
as Megatron-LM's ``set_global_variables`` builds it (its thresholds in samples) and ``update_train_iters``. Writes
``{name: {"error": str | None, "differ": {field: [checkpoint, parsed]}, "parsed": {field: value}, "core": {target:
value}, "batch_schedule": [[samples, batch], ...] | None}}``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import typing
from pathlib import Path

if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
    typing.override = lambda f: f  # type: ignore[attr-defined]

# What differs by design: runtime values Megatron-LM derives or mtk records for its own reasons.
RUNTIME = {"rank", "world_size", "iteration", "consumed_train_samples", "consumed_valid_samples",
           "skipped_train_samples", "data_parallel_size", "no_save_optim", "no_save_rng", "use_dist_ckpt",
           "ckpt_fully_parallel_save", "padded_vocab_size", "distrib_optim_fully_reshardable_mem_efficient"}
SHOWN = ("add_position_embedding", "position_embedding_type", "use_rotary_position_embeddings", "rotary_base",
         "tokenizer_type", "vocab_size", "num_experts", "swiglu", "normalization", "mock_data", "data_path", "load",
         # NVIDIA's H100-recipe settings (#26) and recompute, as Megatron-LM's validate_args leaves them
         "layernorm_zero_centered_gamma", "decoupled_lr", "decoupled_min_lr", "calculate_per_token_loss",
         "accumulate_allreduce_grads_in_fp32", "cross_entropy_loss_fusion", "manual_gc", "manual_gc_interval",
         "check_for_nan_in_loss_and_grad", "recompute_granularity", "recompute_method", "recompute_num_layers",
         # a batch-size schedule: Megatron-LM counts the run in samples
         "step_batch_size_schedule", "global_batch_size", "train_iters", "train_samples", "lr_decay_iters",
         "lr_decay_samples", "lr_warmup_iters", "lr_warmup_samples")


def main() -> None:
    from mtk.training import compat

    compat.install()
    from megatron.training import arguments, checkpointing, global_vars

    arguments.get_device_arch_version = lambda: 10  # validate_args asks the GPU's architecture when TP > 1
    cases_file, out_file = sys.argv[1], sys.argv[2]
    with open(cases_file, "rb") as fh:
        cases = pickle.load(fh)
    out = {}
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/: run by path, not under pytest
    from support.megatron_args_file import read_args_file

    for name, text, ckpt_args, world, targets in cases:
        os.environ["WORLD_SIZE"] = str(world)
        sys.argv = ["pretrain_gpt.py", *read_args_file(text)]
        error = None
        try:
            args = arguments.validate_args(arguments.parse_args(), {})
            global_vars._GLOBAL_ARGS = args
            checkpointing.set_checkpoint_version(3.0)
            checkpointing.check_checkpoint_args(ckpt_args)
            calculator = _calculator(args)  # as set_global_variables, then the iterations of --train-samples
        except (AssertionError, SystemExit, RuntimeError, ValueError) as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}", "differ": {}, "parsed": {}, "core": {}}
            continue
        unused = set()  # fields a model without the feature never reads (mtk records them anyway)
        if not ckpt_args.num_experts:
            unused |= {k for k in vars(ckpt_args) if k.startswith("moe_")}
        if not ckpt_args.group_query_attention:
            unused.add("num_query_groups")
        if ckpt_args.tokenizer_type != "NullTokenizer":
            unused.add("vocab_size")  # Megatron-LM takes it from the tokenizer files when it builds the tokenizer
        differ = {k: [repr(v), repr(getattr(args, k))] for k, v in vars(ckpt_args).items()
                  if k not in RUNTIME | unused and hasattr(args, k) and getattr(args, k) != v}
        out[name] = {"error": error, "differ": differ,
                     "parsed": {k: getattr(args, k, None) for k in SHOWN}, "core": _core(targets),
                     "batch_schedule": getattr(calculator, "schedule", None)}
    with open(out_file, "w") as fh:
        json.dump(out, fh, default=str)


def _calculator(args, train_iters: bool = True):
    """megatron-core's micro-batch calculator as Megatron-LM's set_global_variables builds it from ``args``, and
    (``train_iters``) ``args.train_iters`` as its update_train_iters computes it from --train-samples (what a
    Megatron-LM run of the file records in its own checkpoints; get_optimizer_param_scheduler computes it itself, from
    args that do not have it yet); the calculator itself."""
    from megatron.core import num_microbatches_calculator as calc
    from megatron.training.training import update_train_iters

    calc.destroy_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(rank=args.rank, global_batch_size=args.global_batch_size,
                                          micro_batch_size=args.micro_batch_size,
                                          data_parallel_size=args.data_parallel_size,
                                          decrease_batch_size_if_needed=args.decrease_batch_size_if_needed,
                                          step_batch_size_schedule=args.step_batch_size_schedule,
                                          seq_length=args.seq_length)
    if train_iters:
        update_train_iters(args)
    return calc._GLOBAL_NUM_MICROBATCHES_CALCULATOR


class _NoOptimizer:
    """Enough of an optimizer for OptimizerParamScheduler's constructor (it sets lr/wd on each group)."""

    param_groups: list = [{}]


def _core(targets: list[str]) -> dict:
    """megatron-core's objects as Megatron-LM builds them from the file's argv, and each target's value there. The
    file is for a GPU with Transformer Engine; here they are built with the CPU's kernel choices added (the local
    layers, no fused kernels: rows the file does not write)."""
    from megatron.training import arguments, global_vars, training
    from megatron.training.argument_utils import core_transformer_config_from_args
    from support.megatron_lm_run import CPU_FLAGS

    sys.argv = [*sys.argv, *CPU_FLAGS[:CPU_FLAGS.index("--log-interval")]]
    args = global_vars._GLOBAL_ARGS = arguments.validate_args(arguments.parse_args(), {})
    _calculator(args, train_iters=False)
    built = {"TransformerConfig": core_transformer_config_from_args(args),
             "DistributedDataParallelConfig": training.get_megatron_ddp_config(args),
             "OptimizerConfig": training.get_megatron_optimizer_config(args)[0],
             "OptimizerParamScheduler": training.get_optimizer_param_scheduler(_NoOptimizer())}
    return {t: getattr(built[t.partition(".")[0]], t.partition(".")[2]) for t in targets}


if __name__ == "__main__":
    main()
