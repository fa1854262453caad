"""CPU shim for Megatron-LM's own ``pretrain_gpt.py`` on this GPU-less machine (test scaffolding only).

Python imports this module at start-up when its folder is on ``PYTHONPATH`` (``support.megatron_lm_run`` puts
it there for the torchrun it starts); it acts only in the ranks (``LOCAL_RANK`` set). Megatron-LM's training
loop is unmodified; only these calls are patched:

CUDA calls with no CPU meaning

* ``typing.override``: Megatron-LM's ``megatron/training`` uses Python 3.12's decorator; this is 3.11.
* mtk's own megatron-core CPU layer (``mtk.training.compat.install``: CUDA device arguments -> CPU,
  ``Tensor.cuda()`` a no-op, streams/events/synchronize no-ops, tensor split sizes for gloo's
  ``all_to_all_single``), with its strict-device audit off: that audit checks mtk's engine, not Megatron-LM.
* ``torch.cuda.is_available`` -> True (``initialize_megatron`` asserts CUDA), ``device_count`` -> 1 (with 0
  Megatron-LM skips the model-parallel init), ``get_device_properties`` -> compute capability 10.0
  (``validate_args`` asks it when TP > 1), ``get_rng_state`` -> a 16-byte placeholder (the checkpoint's RNG
  entry holds one CUDA generator state, as mtk writes it; restoring it goes through torch's lazily queued
  CUDA setter, which never runs here).
* ``megatron.core.datasets.utils.compile_helpers`` -> no-op: the megatron-core wheel ships the compiled
  ``helpers_cpp``; compiling needs the tree's Makefile and pybind11.

No Apex / Transformer Engine (true here, and on any machine without them)

* ``megatron.training.training.load_checkpoint`` is wrapped when the distributed optimizer runs on torch's
  Adam, with the two steps Megatron-LM itself needs there for any checkpoint, its own included
  (``adam_without_fused.py`` beside this file: empty Adam state filled before the load for
  ``distrib_optimizer.py``'s ``assert len(steps) == 1``, one ``step`` per parameter after it). That code is
  the tests' own, not mtk's loader's. With Apex or TE (FusedAdam, every GPU image) the wrapper is not installed.

Observation

* with ``MTK_MLM_LOSSES`` set, ``megatron.training.training.training_log`` is wrapped (the call is unchanged)
  to append ``{"iteration", "lm_loss", ...}`` at full precision to that JSON-lines file from the last rank
  (it holds the reduced losses: it is in the last pipeline stage); the log line prints 7 digits, and at
  iteration 2 the average of iterations 1 and 2.

The ranks also need ``TORCHDYNAMO_DISABLE=1``: with ``is_available`` patched, ``torch.compile`` (megatron's
jit fusions) would otherwise generate GPU kernels.
"""

import json
import os
import types
import typing


def _cuda_to_cpu() -> None:
    import torch
    from mtk.training import compat, strict_device

    compat.install()
    strict_device.TRACKER.enabled = False
    strict_device.TRACKER.check_forward = lambda *_a, **_k: None
    strict_device.TRACKER.check_collective = lambda *_a, **_k: None
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_properties = lambda *_a, **_k: types.SimpleNamespace(
        major=10, minor=0, name="cpu", total_memory=0, multi_processor_count=1)
    torch.cuda.get_rng_state = lambda *_a, **_k: torch.zeros(16, dtype=torch.uint8)

    import megatron.core.datasets.utils as dataset_utils

    dataset_utils.compile_helpers = lambda: None


def _distopt_without_fused_adam_load() -> None:
    from adam_without_fused import fill_empty_state, own_step_per_param
    from megatron.core.optimizer import distrib_optimizer
    from megatron.training import training

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return
    original = training.load_checkpoint

    def load_checkpoint(ddp_model, optimizer, *args, **kwargs):
        inner = getattr(optimizer, "chained_optimizers", [optimizer]) if optimizer is not None else []
        distributed = any(isinstance(o, distrib_optimizer.DistributedOptimizer) for o in inner)
        if distributed:
            fill_empty_state(optimizer)
        result = original(ddp_model, optimizer, *args, **kwargs)
        if distributed:
            own_step_per_param(optimizer)
        return result

    training.load_checkpoint = load_checkpoint


def _record_losses(path: str) -> None:
    import torch
    from megatron.training import training

    original = training.training_log

    def training_log(loss_dict, total_loss_dict, learning_rate, iteration, *args, **kwargs):
        if loss_dict and torch.distributed.get_rank() == torch.distributed.get_world_size() - 1:
            record = {"iteration": int(iteration), **{k.replace(" ", "_"): float(v) for k, v in loss_dict.items()}}
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
        return original(loss_dict, total_loss_dict, learning_rate, iteration, *args, **kwargs)

    training.training_log = training_log


if os.environ.get("LOCAL_RANK") is not None:
    if not hasattr(typing, "override"):
        typing.override = lambda f: f
    _cuda_to_cpu()
    _distopt_without_fused_adam_load()
    if os.environ.get("MTK_MLM_LOSSES"):
        _record_losses(os.environ["MTK_MLM_LOSSES"])
