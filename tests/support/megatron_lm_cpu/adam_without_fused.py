"""What Megatron-LM's own distributed-optimizer loader needs on torch's Adam (no Apex/TE), written here from
megatron-core's behaviour, independently of mtk's loader (test scaffolding).

The interop tests resume mtk checkpoints with Megatron-LM's ``load_checkpoint``. Without Apex or Transformer
Engine megatron-core falls back to ``torch.optim.Adam``, and then its ``DistributedOptimizer`` cannot load
anything, Megatron-LM's own checkpoints included:

* before the load it builds a state template from the optimizer's state and asserts one ``step`` per group
  (``distrib_optimizer.py``: ``assert len(steps) == 1``), which fails while torch's Adam has no state yet —
  :func:`fill_empty_state` gives every parameter zero moments and a zero ``step`` first;
* after the load every parameter holds the SAME ``step`` tensor, which torch's Adam increments in place once per
  parameter per step — :func:`own_step_per_param` gives each parameter its own copy of the group's step.

mtk's engine meets the same two limits and has its own code for them (``mtk.training.optimizer_state``); these
tests do not call it, so a wrong work-around in mtk cannot make Megatron-LM's reading agree with mtk's. With
Apex or TE (every GPU image) neither limit exists and nothing here runs.
"""

from __future__ import annotations


def _adams(optimizer):
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        yield opt.optimizer


def fill_empty_state(optimizer) -> None:
    import torch

    for adam in _adams(optimizer):
        for group in adam.param_groups:
            for param in group["params"]:
                state = adam.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)


def own_step_per_param(optimizer) -> None:
    import torch

    for adam in _adams(optimizer):
        for group in adam.param_groups:
            for param in group["params"]:
                state = adam.state.get(param)
                if state and "step" in state:
                    step = group.get("step", state["step"])
                    state["step"] = torch.tensor(float(step), dtype=torch.float32)
