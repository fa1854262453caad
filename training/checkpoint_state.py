"""The state dict of a checkpoint: the common state Megatron-LM writes, and the sharded model/optimizer dicts."""

from __future__ import annotations

from typing import Any

from .checkpoint_layout import MTK_KEY


def topology(job) -> dict[str, int]:
    p = job.parallel
    return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "world": job.cluster.world_size,
            "distributed_optimizer": int(p.distributed_optimizer)}


def common_state(job, *, iteration: int, consumed_samples: int, data_parallel_size: int, vocab_size: int,
                 padded_vocab_size: int, flops_so_far: float,
                 tokenizer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The non-tensor part of a checkpoint: Megatron-LM's fields, plus mtk's own under ``mtk``.
    ``vocab_size``: the vocabulary the model was built with (the tokenizer's), not ``model.vocab_size``;
    ``tokenizer``: the record of :mod:`interop.hf_tokenizer`, which export and init_from carry on."""
    from .interop import megatron_lm

    args = megatron_lm.megatron_args(job, data_parallel_size=data_parallel_size, vocab_size=vocab_size,
                                     padded_vocab_size=padded_vocab_size,
                                     consumed_train_samples=consumed_samples, iteration=iteration)
    return {
        "args": args,
        "checkpoint_version": megatron_lm.CHECKPOINT_VERSION,
        "iteration": iteration,
        "num_floating_point_operations_so_far": float(flops_so_far),
        MTK_KEY: {"topology": topology(job), "precision": job.train.precision,
                              "job_name": job.name, **({"tokenizer": tokenizer} if tokenizer else {})},
    }


def model_key(i: int, n: int) -> str:
    return "model" if n == 1 else f"model{i}"


def build_state_dict(model: list, optimizer, scheduler, common: dict[str, Any], is_loading: bool,
                     metadata: dict[str, Any] | None, rng: bool = True, rerun: bool = True) -> dict[str, Any]:
    """The sharded state dict, laid out as Megatron-LM's ``generate_state_dict``: model chunks, optimizer,
    scheduler, per-rank RNG (its list-of-dicts format), rerun state and the plain common values.

    ``metadata`` is the content metadata (sharded-state-dict options) the optimizer keys are built with;
    ``optimizer=None`` builds the model part only (weights-only loads)."""
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.utils import unwrap_model

    from .interop import megatron_lm

    runtime = megatron_lm.runtime_metadata(metadata)
    sd: dict[str, Any] = dict(common)
    for i, chunk in enumerate(unwrap_model(model)):
        sd[model_key(i, len(model))] = chunk.sharded_state_dict(metadata=runtime)
    if optimizer is not None:
        model_sd: dict[str, Any] = {}
        for i in range(len(model)):
            model_sd.update(sd[model_key(i, len(model))])
        sd["optimizer"] = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=runtime)
        sd["opt_param_scheduler"] = scheduler.state_dict()
    if rng:
        pp, tp = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
        sd["rng_state"] = ShardedObject(
            "rng_state", megatron_lm.rng_state_list(), (pp, tp),
            (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
            replica_id=ps.get_data_parallel_rank(with_context_parallel=True))
    if rerun and (state := megatron_lm.rerun_state()) is not None:
        sd["rerun_state_machine"] = state
    return sd
