"""Loading optimizer state the way megatron-core 0.19 cannot alone: Adam's per-parameter step, and the
distributed optimizer's model-space (``fully_reshardable``) state into a non-fused Adam."""

from __future__ import annotations

from typing import Any


def keeps_per_param_step(inner) -> bool:
    """torch's Adam/AdamW keep ``step`` per parameter; TE's and Apex's FusedAdam keep it per param group
    only, and their ``state_dict()`` maps every per-param key through a dtype table (KeyError 'step')."""
    return type(inner).__module__.startswith("torch.optim")


def prefill_adam_state(optimizer) -> None:
    """Give every inner Adam param an (exp_avg, exp_avg_sq) state, plus ``step`` where the optimizer keeps
    it per parameter, so loading has tensors to fill."""
    import torch

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = opt.optimizer
        per_param_step = keeps_per_param_step(inner)
        for group in inner.param_groups:
            for p in group["params"]:
                st = inner.state[p]
                if "exp_avg" not in st:
                    if per_param_step:
                        st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


MODEL_SPACE_LOADERS = {"fully_reshardable": "load_parameter_state_from_fully_reshardable",
                        "fully_sharded_model_space": "load_parameter_state_from_fs_model_space"}


def fused_adam(optimizer) -> bool:
    return not any(keeps_per_param_step(o.optimizer) for o in getattr(optimizer, "chained_optimizers", [optimizer]))


def load_model_space_distopt(optimizer, state: Any) -> None:
    """Load a model-space (``fully_reshardable``) distributed-optimizer state with torch's Adam (no Apex/TE).

    megatron-core's ``DistributedOptimizer.load_state_dict`` gives every param a ``step`` tensor (torch Adam
    needs one), then copies each tensor of a param's state from the checkpoint, which keeps ``step`` per
    param group only: KeyError 'step'. So the param groups/scaler load first, the per-param ``step`` goes,
    the parameter state loads, and :func:`restore_adam_steps` puts ``step`` back from the group."""
    opts = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(opts) == 1:
        parts = [state]
    else:
        parts = [v for _, v in sorted(state.items())] if isinstance(state, dict) else list(state)
    for opt, part in zip(opts, parts, strict=True):
        part = dict(part)
        param_state = part.pop("param_state")
        loader = MODEL_SPACE_LOADERS[part.pop("param_state_sharding_type")]
        opt.load_state_dict(part)
        for st in opt.optimizer.state.values():
            st.pop("step", None)
        getattr(opt, loader)(param_state)
    if len(opts) > 1:
        optimizer._synchronize_steps()


def restore_adam_steps(optimizer) -> None:
    """Give every Adam param its own, correct ``step`` tensor after a load.

    The distributed optimizer stores ``step`` once per param group; on load (no Apex/TE) it either assigns
    ONE shared tensor to all params — torch Adam increments it in place once per param, so training
    drifts — or leaves the pre-filled 0. Both break bias correction. The group's value is authoritative.
    """
    import torch

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = opt.optimizer
        if not keeps_per_param_step(inner):
            continue  # FusedAdam: the group's step is the only one, and megatron restored it
        for group in inner.param_groups:
            group_step = group.get("step")
            for p in group["params"]:
                st = inner.state.get(p)
                if not st or ("step" not in st and group_step is None):
                    continue
                value = group_step if group_step is not None else st["step"]
                st["step"] = torch.tensor(float(value), dtype=torch.float32)
