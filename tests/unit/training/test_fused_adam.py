"""``mtk.training.fused_adam``: torch's Adam inside a megatron-core optimizer steps with the fused kernel, while the
state dict it hands out (and takes back) is the one the default ``foreach`` optimizer writes."""

from __future__ import annotations

import copy
import types

import torch
from mtk.training.fused_adam import torch_adams, use_fused_kernel


def _adam(seed: int = 0) -> torch.optim.AdamW:
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    return torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)


def _step(opt: torch.optim.Optimizer, n: int) -> None:
    for i in range(n):
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.full_like(p, 0.1 * (i + 1)) + p.detach() * 0.01
        opt.step()


def test_megatron_optimizers_are_found_chained_or_not():
    a, b = _adam(), _adam(1)
    chained = types.SimpleNamespace(chained_optimizers=[types.SimpleNamespace(optimizer=a),
                                                        types.SimpleNamespace(optimizer=b)])
    assert torch_adams(chained) == [a, b]
    assert torch_adams(types.SimpleNamespace(optimizer=a)) == [a]
    assert torch_adams(types.SimpleNamespace(optimizer=object())) == []
    assert use_fused_kernel(chained) == 2 and all(g["fused"] and g["foreach"] is False
                                                  for opt in (a, b) for g in opt.param_groups)


def test_fused_steps_match_foreach_and_the_state_dict_is_foreach_shaped():
    fused, plain = _adam(), _adam()
    use_fused_kernel(types.SimpleNamespace(optimizer=fused))
    _step(fused, 3)
    _step(plain, 3)
    for p, q in zip(fused.param_groups[0]["params"], plain.param_groups[0]["params"], strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    saved, reference = fused.state_dict(), plain.state_dict()
    assert [{k: v for k, v in g.items()} for g in saved["param_groups"]] == reference["param_groups"]
    for key, entry in saved["state"].items():
        assert entry["step"].device.type == "cpu" and entry["step"].dtype == torch.float32
        assert float(entry["step"]) == float(reference["state"][key]["step"]) == 3.0
    assert all(g["fused"] for g in fused.param_groups)  # handing out the state changed nothing live


def test_a_foreach_state_dict_loads_into_the_fused_optimizer_and_back():
    plain = _adam()
    _step(plain, 2)
    fused = _adam(5)
    use_fused_kernel(types.SimpleNamespace(optimizer=fused))
    fused.load_state_dict(copy.deepcopy(plain.state_dict()))  # as a checkpoint round trip: no shared tensors
    assert all(g["fused"] and g["foreach"] is False for g in fused.param_groups)
    for p in fused.param_groups[0]["params"]:
        assert fused.state[p]["step"].device == p.device
    back = _adam(6)
    back.load_state_dict(copy.deepcopy(fused.state_dict()))
    assert all(g["fused"] is None for g in back.param_groups)
    _step(fused, 1)
    _step(back, 1)
    assert float(next(iter(fused.state.values()))["step"]) == float(next(iter(back.state.values()))["step"]) == 3.0
