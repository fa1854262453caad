"""Megatron-LM's own loader resumes an mtk checkpoint, then mtk's loop continues (run under torchrun).

``python -m torch.distributed.run ... mlm_load_and_continue.py --job JOB --run-dir DIR --load CKPT_ROOT``

The model and optimizer are mtk's (the same megatron-core objects Megatron-LM builds); everything that
reads the checkpoint is Megatron-LM's ``megatron.training.checkpointing.load_checkpoint`` from the
megatron-core wheel, driven by ``megatron.training.arguments.parse_args``/``validate_args`` over the arguments
mtk wrote beside the checkpoint (``megatron_lm_args.txt``, ``--load`` pointed at CKPT_ROOT; no override flags),
with Megatron-LM's own
``get_optimizer_param_scheduler``. The continuation's losses land in DIR/metrics.jsonl, what the loader
returned in DIR/mlm_load.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

if not hasattr(typing, "override"):  # Megatron-LM's training package uses Python 3.12's typing.override
    typing.override = lambda f: f
# the tests' own Adam steps for Megatron-LM's loader without Apex/TE (importing the module, not its sitecustomize)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "support" / "megatron_lm_cpu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/, for support.megatron_args_file


def main() -> None:
    import torch
    from adam_without_fused import fill_empty_state, own_step_per_param
    from mtk.training import checkpoint, compat, data
    from mtk.training.interop import megatron_lm
    from mtk.training.loop import Trainer
    from support.megatron_args_file import read_args_file

    from mtk.spec import load_job_json

    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--load", required=True)
    a = ap.parse_args()
    job = load_job_json(Path(a.job))
    compat.install()
    if not torch.cuda.is_available():
        # Megatron-LM's loader builds an RNG template with torch.cuda.get_rng_state(); no CUDA generator
        # exists here (the loaded value replaces the template).
        torch.cuda.get_rng_state = lambda *_a, **_k: torch.zeros(16, dtype=torch.uint8)

    from megatron.training import arguments
    from megatron.training.arguments import parse_args, validate_args

    if not torch.cuda.is_available():  # validate_args asks the GPU's architecture when TP > 1
        arguments.get_device_arch_version = lambda: 10
    from megatron.training.checkpointing import load_checkpoint
    from megatron.training.global_vars import set_global_variables
    from megatron.training.training import get_optimizer_param_scheduler

    path, _iteration, _release = checkpoint.resolve_checkpoint_dir(a.load)
    argv = read_args_file((path / megatron_lm.ARGS_FILE).read_text())
    for flag in ("--load", "--save"):
        argv[argv.index(flag) + 1] = a.load
    sys.argv = ["pretrain_gpt.py", *argv]
    args = validate_args(parse_args(), {})
    set_global_variables(args, build_tokenizer=False)

    trainer = Trainer(job, a.run_dir)
    trainer.setup()  # the job has train.checkpoint.load=false: mtk loads nothing
    trainer.scheduler = get_optimizer_param_scheduler(trainer.optimizer)
    from megatron.core.optimizer import distrib_optimizer

    no_apex_te_distopt = args.use_distributed_optimizer and not distrib_optimizer.HAVE_APEX_OR_TE
    if no_apex_te_distopt:
        # megatron-core's distributed optimizer without Apex/TE (this CPU machine) cannot build its load
        # template from empty Adam state and afterwards shares one `step` tensor across params - for
        # Megatron-LM's own checkpoints too. The tests' own two steps for that (not mtk's loader code):
        fill_empty_state(trainer.optimizer)
    iteration, flops = load_checkpoint(trainer.model, trainer.optimizer, trainer.scheduler)
    if no_apex_te_distopt:
        own_step_per_param(trainer.optimizer)
    trainer.iteration, trainer.consumed = iteration, args.consumed_train_samples
    train_ds, _ = data.build_datasets(job, trainer.tok, log=lambda m: None)
    trainer.train_sampler = data.ResumableSampler(len(train_ds), trainer.consumed, job.train.micro_batch_size,
                                                  trainer.dp_rank, trainer.dp_size)
    trainer.train_iter = data.batches(train_ds, trainer.train_sampler, job.data.num_workers)
    if trainer.rank == 0:
        Path(a.run_dir, "mlm_load.json").write_text(json.dumps({
            "iteration": iteration, "flops": flops, "consumed_train_samples": args.consumed_train_samples}))
    code, reason = trainer.run()
    trainer.close()
    assert code == 0, reason


if __name__ == "__main__":
    main()
