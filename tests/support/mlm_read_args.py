"""Megatron-LM's own code reads an mtk checkpoint's arguments (test scaffolding; one process, no torchrun).

``python mlm_read_args.py CKPT_ROOT WORLD_SIZE OUT.json``: the arguments mtk wrote beside the tracked checkpoint
(``megatron_lm_args.txt``) through ``megatron.training.arguments.parse_args`` + ``validate_args`` (WORLD_SIZE the
run's), then ``megatron.training.checkpointing.load_args_from_checkpoint`` — the reader behind pretrain_gpt.py's
``--use-checkpoint-args`` — and the loader's ``check_checkpoint_args`` over what it read. Writes
``{"checkpoint": {field: value}, "parsed": {field: value}, "check_error": str | None}``.
"""

from __future__ import annotations

import json
import os
import sys
import typing
from pathlib import Path

if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
    typing.override = lambda f: f  # type: ignore[attr-defined]

FIELDS = ("iteration", "vocab_size", "padded_vocab_size", "make_vocab_size_divisible_by", "tokenizer_type",
          "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
          "data_parallel_size", "world_size", "consumed_train_samples", "global_batch_size", "micro_batch_size",
          "num_experts", "moe_router_topk", "use_distributed_optimizer", "bf16", "fp16", "num_layers",
          "hidden_size", "train_iters")


def main() -> None:
    root, world, out_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    from mtk.training import compat

    compat.install()
    from megatron.training import arguments, checkpointing, global_vars
    from mtk.training.checkpoint import resolve_checkpoint_dir
    from mtk.training.interop.megatron_lm import ARGS_FILE

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run by path, not under pytest
    from support.megatron_args_file import read_args_file

    arguments.get_device_arch_version = lambda: 10  # validate_args asks the GPU's architecture when TP > 1
    path, _iteration, _release = resolve_checkpoint_dir(root)
    argv = read_args_file((path / ARGS_FILE).read_text())
    argv[argv.index("--load") + 1] = root
    os.environ["WORLD_SIZE"] = str(world)
    sys.argv = ["pretrain_gpt.py", *argv]
    args = arguments.validate_args(arguments.parse_args(), {})
    global_vars._GLOBAL_ARGS = args
    parsed = {k: getattr(args, k, None) for k in FIELDS}
    _args, ckpt_args = checkpointing.load_args_from_checkpoint(args)
    check_error = None
    checkpointing.set_checkpoint_version(getattr(ckpt_args, "checkpoint_version", None) or 3.0)
    try:
        checkpointing.check_checkpoint_args(ckpt_args)
    except AssertionError as exc:
        check_error = str(exc)
    found = {k: getattr(ckpt_args, k, None) for k in FIELDS}
    found["iteration"] = args.iteration  # load_args_from_checkpoint takes it from the state dict
    with open(out_file, "w") as fh:
        json.dump({"checkpoint": found, "parsed": parsed, "check_error": check_error}, fh,
                  default=str)


if __name__ == "__main__":
    main()
