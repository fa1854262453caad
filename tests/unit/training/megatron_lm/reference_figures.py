"""Megatron-LM's own FLOPs and activation-memory figures for mtk runs (test scaffolding, one process).

``python reference_figures.py CASES.json OUT.json``: CASES.json holds ``{name: {"argv": [...], "world": int,
"padded_vocab": int, "micro_batches": int}}`` where ``argv`` is the ``pretrain_gpt.py`` argv mtk writes beside
a checkpoint of that run (``megatron_lm.pretrain_gpt_argv``). Per case: Megatron-LM's ``parse_args`` +
``validate_args`` (WORLD_SIZE = the run's), ``padded_vocab_size`` as its tokenizer builder sets it, then
``megatron.training.training.num_floating_point_operations(args, global_batch_size)`` and
``theoretical_memory_usage.report_theoretical_memory(args, micro_batches)``. Writes ``{name: {"flops": float,
"activation_bytes": float, "recompute_granularity": ..., "sequence_parallel": ...}}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import typing

if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
    typing.override = lambda f: f  # type: ignore[attr-defined]


def main() -> None:
    from mtk.training import compat

    compat.install()
    from megatron.training import arguments, theoretical_memory_usage, training

    arguments.get_device_arch_version = lambda: 10  # validate_args asks the GPU's architecture when TP > 1
    cases_file, out_file = sys.argv[1], sys.argv[2]
    with open(cases_file) as fh:
        cases = json.load(fh)
    out = {}
    for name, case in cases.items():
        os.environ["WORLD_SIZE"] = str(case["world"])
        sys.argv = ["pretrain_gpt.py", *case["argv"]]
        args = arguments.validate_args(arguments.parse_args(), {})
        args.padded_vocab_size = case["padded_vocab"]
        flops = training.num_floating_point_operations(args, args.global_batch_size)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its figures
            _weights, activation_mb, _total = theoretical_memory_usage.report_theoretical_memory(
                args, num_microbatches=case["micro_batches"])
        out[name] = {"flops": flops, "activation_bytes": activation_mb * theoretical_memory_usage.NUM_BYTES_IN_MEGABYTE,
                     "recompute_granularity": args.recompute_granularity,
                     "sequence_parallel": args.sequence_parallel}
    with open(out_file, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
