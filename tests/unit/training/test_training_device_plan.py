"""The device plan (layer spec, fusions, overlap per device), what ``mtk validate`` prints from it, and the
FusedAdam-safe Adam state prefill used on distributed-optimizer resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mtk.training import device_plan, model, optimizer_state

from mtk.spec import Job

REPO = Path(__file__).resolve().parents[3]


def _job(model_: dict | None = None, **sections) -> Job:
    return Job.model_validate({"name": "t", "model": {"preset": "tiny", **(model_ or {})}, **sections})


def test_cpu_plan_is_local_unfused_and_synchronous():
    p = device_plan.plan(_job(parallel={"distributed_optimizer": True}), gpu=False, te=False, dp_size=2)
    assert p.layer_spec == "local"
    assert not any([p.bias_activation_fusion, p.bias_dropout_fusion, p.masked_softmax_fusion,
                    p.gradient_accumulation_fusion, p.apply_rope_fusion, p.persist_layer_norm,
                    p.overlap_grad_reduce, p.overlap_param_gather, p.align_param_gather])


def test_gpu_plan_with_te_fuses_and_overlaps_with_data_parallelism():
    job = _job({"position_embedding": "rope", "activation": "swiglu"},
               parallel={"distributed_optimizer": True, "pp": 2})
    p = device_plan.plan(job, gpu=True, te=True, dp_size=4)
    assert p.layer_spec == "transformer_engine"
    assert p.gradient_accumulation_fusion and p.apply_rope_fusion and p.bias_activation_fusion
    assert p.overlap_grad_reduce and p.overlap_param_gather and p.align_param_gather
    assert not p.persist_layer_norm  # TE norms


def test_gpu_plan_without_te_needs_apex_kernels_and_no_rope_fusion():
    job = _job({"position_embedding": "rope"})
    bare = device_plan.plan(job, gpu=True, te=False, dp_size=2)
    assert bare.layer_spec == "local" and not bare.gradient_accumulation_fusion and not bare.apply_rope_fusion
    assert bare.overlap_grad_reduce and not bare.overlap_param_gather  # no distributed optimizer
    apex = device_plan.plan(job, gpu=True, te=False, apex=True, grad_accum_kernel=True, dp_size=2)
    assert apex.gradient_accumulation_fusion and apex.persist_layer_norm
    assert not device_plan.plan(job, gpu=True, te=True, dp_size=1).overlap_grad_reduce  # nothing to reduce


def test_transformer_config_takes_its_fusions_from_the_plan():
    job = _job({"position_embedding": "rope"})
    p = device_plan.plan(job, gpu=True, te=True, dp_size=2)
    kw = model.transformer_config_kwargs(job, cpu=False, plan=p)
    for field in ("gradient_accumulation_fusion", "apply_rope_fusion", "bias_dropout_fusion",
                  "masked_softmax_fusion", "persist_layer_norm", "bias_activation_fusion"):
        assert kw[field] == getattr(p, field), field
    cpu = model.transformer_config_kwargs(job, cpu=True)
    assert cpu["gradient_accumulation_fusion"] is False and cpu["apply_rope_fusion"] is False


def _validate(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "mtk.launcher.cli", "validate", "-q", *args], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.megatron  # mtk validate builds the model with megatron-core (child process)
def test_validate_prints_what_a_gpu_run_will_use():
    out = _validate("examples/gpt-7.5b-p5-slurm.yaml", "--backend", "slurm")
    line = next(ln for ln in out.splitlines() if ln.startswith("device plan"))
    assert "gpu/nccl, with Transformer Engine" in line and "TE layer spec" in line
    assert "grad-accum" in line and "overlap: grad-reduce, param-gather" in line
    assert "if the image is without Transformer Engine: local layer spec; attention: torch SDPA (flash/cuDNN); " \
        "Adam: torch fused" in out
    assert "TE layer spec; attention: Transformer Engine; Adam: TE FusedAdam" in line


@pytest.mark.megatron  # mtk validate builds the model with megatron-core (child process)
def test_validate_prints_the_cpu_plan_for_cpu_jobs():
    out = _validate("examples/tiny.yaml")
    assert "device plan (cpu/gloo):  local layer spec; attention: megatron-core unfused; Adam: torch foreach; " \
        "fused: none; overlap: off" in out


@pytest.mark.parametrize(("gpu", "te", "apex", "asked", "attention", "adam"), [
    (True, False, False, "auto", "sdpa", "torch-fused"),
    (True, True, True, "auto", "te", "te-fused"),
    (True, False, True, "auto", "sdpa", "apex-fused"),
    (False, False, False, "auto", "unfused", "torch-foreach"),
    (True, False, False, "unfused", "unfused", "torch-fused"),
    (True, True, False, "sdpa", "sdpa", "te-fused"),
    (False, False, False, "sdpa", "sdpa", "torch-foreach"),
])
def test_attention_and_adam_follow_the_spec_and_the_libraries(gpu, te, apex, asked, attention, adam):
    p = device_plan.plan(_job({"attention_backend": asked}), gpu=gpu, te=te, apex=apex, dp_size=1)
    assert (p.attention, p.adam) == (attention, adam)


def test_auto_attention_keeps_megatron_core_where_sdpa_cannot_and_explicit_choices_are_refused():
    from mtk.spec.errors import SpecError
    from mtk.spec.loader import validate

    cp2 = {"name": "t", "model": {"preset": "tiny"}, "parallel": {"cp": 2, "tp": 1},
           "cluster": {"nodes": 1, "procs_per_node": 2, "device": "gpu"}}
    assert device_plan.plan(validate(cp2), gpu=True, te=False).attention == "unfused"
    assert device_plan.plan(validate(cp2), gpu=True, te=True).attention == "te"
    for asked in ("sdpa", "unfused"):
        with pytest.raises(SpecError, match=r"model\.attention_backend .*context parallelism"):
            validate({**cp2, "model": {"preset": "tiny", "attention_backend": asked}})


@pytest.mark.megatron  # builds megatron-core's layer specs
def test_layer_spec_puts_the_planned_core_attention_in_its_slot():
    from mtk.training import compat

    compat.install_import_stubs()  # megatron-core imports triton for one GPU-only module; absent here
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from mtk.training.sdpa_attention import SDPAttention

    slot = lambda spec: spec.submodules.self_attention.submodules.core_attention  # noqa: E731
    assert slot(model.layer_spec(_job(), False, attention="sdpa")) is SDPAttention
    assert slot(model.layer_spec(_job(), False, attention="unfused")) is DotProductAttention
    moe = _job({"moe": {"num_experts": 4}})
    assert slot(model.layer_spec(moe, False, attention="sdpa")) is SDPAttention


class FusedAdamLike(torch.optim.Optimizer):
    """TE FusedAdam's state_dict contract (TE cannot be installed here): per-param state keys go through
    a dtype table that has no 'step'."""

    name_to_dtype_map = {"exp_avg": torch.float32, "exp_avg_sq": torch.float32}

    def __init__(self, params):
        super().__init__(params, {"lr": 1e-3})

    def state_dict(self):
        sd = super().state_dict()
        for st in sd["state"].values():
            for name in st:
                st[name] = st[name].to(self.name_to_dtype_map[name])
        return sd


FusedAdamLike.__module__ = "transformer_engine.pytorch.optimizers.fused_adam"


class _Wrapper:
    def __init__(self, inner):
        self.optimizer = inner


def test_prefill_adds_step_only_where_the_optimizer_keeps_it_per_param():
    p = torch.nn.Parameter(torch.zeros(3))
    fused = _Wrapper(FusedAdamLike([p]))
    optimizer_state.prefill_adam_state(fused)
    fused.optimizer.param_groups[0]["step"] = 7
    optimizer_state.restore_adam_steps(fused)
    assert set(fused.optimizer.state[p]) == {"exp_avg", "exp_avg_sq"}
    fused.optimizer.state_dict()  # KeyError 'step' before the fix

    q = torch.nn.Parameter(torch.zeros(3))
    plain = _Wrapper(torch.optim.Adam([q]))
    optimizer_state.prefill_adam_state(plain)
    plain.optimizer.param_groups[0]["step"] = 7
    optimizer_state.restore_adam_steps(plain)
    assert float(plain.optimizer.state[q]["step"]) == 7.0


def test_process_group_timeout_is_a_spec_field_with_a_floor():
    import pytest

    from mtk.spec.errors import SpecError
    from mtk.spec.loader import validate

    assert _job().cluster.pg_timeout_s == 600
    assert _job(cluster={"pg_timeout_s": 3600}).cluster.pg_timeout_s == 3600
    with pytest.raises(SpecError, match=r"cluster\.pg_timeout_s"):
        validate({"name": "t", "model": {"preset": "tiny"}, "cluster": {"pg_timeout_s": 5}})


def test_local_spec_fuses_softmax_only_where_its_kernels_import():
    """megatron-core's local attention imports ``scaled_masked_softmax_cuda`` at the first forward when the fusion
    is on: without Apex's kernels a GPU run died there (H200, megatron-core 0.19.2), so the plan turns it off."""
    job = _job({})
    assert not device_plan.plan(job, gpu=True, te=False, dp_size=1).masked_softmax_fusion
    assert device_plan.plan(job, gpu=True, te=False, dp_size=1, softmax_kernels=True).masked_softmax_fusion
    assert device_plan.plan(job, gpu=True, te=True, dp_size=1).masked_softmax_fusion  # TE's own attention
    here = device_plan.plan_for_here(job, gpu=True, dp_size=1)
    assert here.masked_softmax_fusion == (here.layer_spec == "transformer_engine" or device_plan.have_softmax_kernels())
