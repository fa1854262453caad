"""NVIDIA's H100 recipe settings (#26 item 7): each spec field reaches the megatron-core config mtk builds
(TransformerConfig, DistributedDataParallelConfig, OptimizerConfig, the optimizer's param groups), the recipe's
value is the default where it is a speed setting for H100 and harmless on CPU, the device plan / ``mtk validate``
print them, and settings that cannot act are refused. Configs are built without training (megatron-core imported
once; no process group)."""

from __future__ import annotations

import gc
import json

import pytest
from mtk.training import compat, device_plan, gc_control, loop, metrics, model, optim
from mtk.training.interop import megatron_lm

from mtk.spec import Job, SpecError
from mtk.spec.loader import validate

compat.install_import_stubs()  # megatron-core imports triton for one GPU-only module; absent here
pytestmark = pytest.mark.megatron  # most tests build megatron-core's real configs

GPU = {"nodes": 1, "procs_per_node": 8, "device": "gpu"}
CPU = {"nodes": 1, "procs_per_node": 2, "device": "cpu"}


def _job(cluster=GPU, model_: dict | None = None, **sections) -> Job:
    return validate({"name": "r", "cluster": cluster, "model": {"preset": "tiny", **(model_ or {})}, **sections})


def _plan(job: Job, gpu: bool = True):
    return device_plan.plan(job, gpu=gpu, te=gpu, dp_size=8 if gpu else 2)


def _tc(job: Job, gpu: bool = True):
    """The real TransformerConfig (fp8 needs TE at build time, so fp8 is checked on the kwargs)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(**model.transformer_config_kwargs(job, cpu=not gpu, plan=_plan(job, gpu)))


FP8 = {"precision": "fp8"}
DIST = {"distributed_optimizer": True}


# --------------------------------------------------------------------------- fp8 recipe
def test_fp8_defaults_are_the_h100_recipe():
    kw = model.transformer_config_kwargs(_job(train=FP8, parallel=DIST), cpu=False, plan=_plan(_job(train=FP8,
                                                                                                  parallel=DIST)))
    assert (kw["fp8"], kw["fp8_recipe"]) == ("hybrid", "delayed")
    assert (kw["fp8_amax_history_len"], kw["fp8_amax_compute_algo"]) == (1024, "max")
    assert kw["fp8_param"] is True  # --fp8-param-gather, with the distributed optimizer


def test_fp8_fields_reach_the_config():
    job = _job(train={**FP8, "fp8": {"format": "e4m3", "amax_history_len": 16, "amax_compute_algo": "most_recent",
                                     "param_gather": False}}, parallel=DIST)
    kw = model.transformer_config_kwargs(job, cpu=False, plan=_plan(job))
    assert (kw["fp8"], kw["fp8_amax_history_len"], kw["fp8_amax_compute_algo"], kw["fp8_param"]) == \
        ("e4m3", 16, "most_recent", False)
    tensorwise = _job(train={**FP8, "fp8": {"recipe": "tensorwise"}}, parallel=DIST)
    kw = model.transformer_config_kwargs(tensorwise, cpu=False, plan=_plan(tensorwise))
    assert kw["fp8_recipe"] == "tensorwise" and "fp8_amax_history_len" not in kw and kw["fp8_param"] is False


def test_fp8_param_gather_default_off_without_distributed_optimizer_and_refused_when_asked():
    job = _job(train=FP8)
    assert model.transformer_config_kwargs(job, cpu=False, plan=_plan(job))["fp8_param"] is False
    with pytest.raises(SpecError, match=r"train.fp8.param_gather .*distributed optimizer"):
        _job(train={**FP8, "fp8": {"param_gather": True}})


def test_fp8_settings_without_fp8_are_refused_and_fp8_on_cpu_too():
    with pytest.raises(SpecError, match=r"train.fp8: only applies with train.precision: fp8"):
        _job(train={"fp8": {"amax_history_len": 16}})
    with pytest.raises(SpecError, match=r"train.fp8.amax_compute_algo .*delayed recipe"):
        _job(train={**FP8, "fp8": {"recipe": "tensorwise", "amax_compute_algo": "most_recent"}})
    # the spec that travels with a run (every field written out) validates again
    job = _job(train={**FP8, "fp8": {"recipe": "tensorwise", "param_gather": False}}, parallel=DIST)
    assert validate(json.loads(job.to_json())) == job
    plain = _job()
    assert validate(json.loads(plain.to_json())).train.fp8 is None
    with pytest.raises(SpecError, match=r"train.precision .*fp8 needs a GPU"):
        _job(cluster=CPU, train=FP8)


# --------------------------------------------------------------------------- gradient reduce dtype
def test_grad_reduce_in_bf16_on_gpu_by_default_fp32_on_cpu():
    gpu = _job(train={"precision": "bf16"})
    assert optim.ddp_config(gpu, _plan(gpu)).grad_reduce_in_fp32 is False  # --grad-reduce-in-bf16
    cpu = _job(cluster=CPU, train={"precision": "bf16"})
    assert optim.ddp_config(cpu, _plan(cpu, gpu=False)).grad_reduce_in_fp32 is True
    fp32 = _job(train={"precision": "fp32"})
    assert optim.ddp_config(fp32, _plan(fp32)).grad_reduce_in_fp32 is True


def test_grad_reduce_dtype_explicit_values_are_honoured_or_refused():
    cpu_bf16 = _job(cluster=CPU, train={"precision": "bf16", "grad_reduce_dtype": "bf16"})
    assert optim.ddp_config(cpu_bf16, _plan(cpu_bf16, gpu=False)).grad_reduce_in_fp32 is False
    gpu_fp32 = _job(train={"precision": "bf16", "grad_reduce_dtype": "fp32"})
    assert optim.ddp_config(gpu_fp32, _plan(gpu_fp32)).grad_reduce_in_fp32 is True
    with pytest.raises(SpecError, match=r"train.grad_reduce_dtype .*need train.precision bf16 or fp8"):
        _job(train={"precision": "fp32", "grad_reduce_dtype": "bf16"})


# --------------------------------------------------------------------------- cross-entropy fusion
def test_cross_entropy_fusion_on_gpu_by_default_and_explicit_on_cpu():
    assert _tc(_job()).cross_entropy_loss_fusion is True
    assert _tc(_job()).cross_entropy_fusion_impl == "native"
    assert _tc(_job(cluster=CPU), gpu=False).cross_entropy_loss_fusion is False
    assert _tc(_job(cluster=CPU, train={"cross_entropy_fusion": True}), gpu=False).cross_entropy_loss_fusion is True
    assert _tc(_job(train={"cross_entropy_fusion": False})).cross_entropy_loss_fusion is False


# --------------------------------------------------------------------------- manual GC
def test_manual_gc_default_on_and_controls_the_collector():
    assert _job().train.manual_gc is True and _job().train.manual_gc_interval == 0
    was = gc.isenabled()
    ctl = gc_control.ManualGC(True, 3)
    try:
        ctl.start()
        assert not gc.isenabled() and ctl.collections == 1
        for it in range(1, 7):
            ctl.after_step(it)
        assert ctl.collections == 3  # start + iterations 3 and 6
    finally:
        ctl.stop()
    assert gc.isenabled() == was
    off = gc_control.ManualGC(False, 3)
    off.start()
    off.after_step(3)
    assert gc.isenabled() == was and off.collections == 0


# --------------------------------------------------------------------------- decoupled LR
def test_decoupled_lr_reaches_the_optimizer_config():
    job = _job(train={"lr": 1.5e-4, "min_lr": 1e-5, "decoupled_lr": 5e-4, "decoupled_min_lr": 4.5e-5})
    cfg = optim.optimizer_config(job)
    assert (cfg.decoupled_lr, cfg.decoupled_min_lr) == (5e-4, 4.5e-5)
    assert optim.optimizer_config(_job()).decoupled_lr is None
    with pytest.raises(SpecError, match=r"train.decoupled_min_lr .*needs train.decoupled_lr"):
        _job(train={"decoupled_min_lr": 1e-5})
    with pytest.raises(SpecError, match=r"train.decoupled_min_lr .*above train.decoupled_lr"):
        _job(train={"decoupled_lr": 1e-4, "decoupled_min_lr": 1e-3})


def test_logged_lr_comes_from_a_default_group_and_the_decoupled_one_beside_it():
    groups = [{"lr": 5e-4, "default_config": False}, {"lr": 1.5e-4, "default_config": True}]
    assert metrics.logged_lrs(groups) == (1.5e-4, 5e-4)
    assert metrics.logged_lrs([{"lr": 1e-3, "default_config": True}]) == (1e-3, None)
    line = metrics.format_line({"iteration": 1, "consumed_samples": 8, "step_time_ms": 1.0, "tflops_per_gpu": 1.0,
                                "tokens_per_s": 1.0, "lr": 1.5e-4, "decoupled_lr": 5e-4, "global_batch_size": 8,
                                "lm_loss": 2.0, "loss_scale": 1.0, "grad_norm": 1.0, "skipped": 0, "nan": 0}, 10)
    assert "learning rate: 1.500000E-04 | decoupled learning rate: 5.000000E-04 |" in line


# --------------------------------------------------------------------------- layernorm-1p
def test_layernorm_1p_reaches_the_config_and_the_local_norm_is_zero_centred():
    import torch
    from mtk.training.norms import TorchNorm

    assert _tc(_job(model_={"layernorm_1p": True})).layernorm_zero_centered_gamma is True
    assert _tc(_job()).layernorm_zero_centered_gamma is False
    for norm_type in ("LayerNorm", "RMSNorm"):
        cfg = _tc(_job(cluster=CPU, model_={"layernorm_1p": True, "normalization": norm_type}), gpu=False)
        norm = TorchNorm(cfg, 64)
        assert torch.equal(norm.weight.detach(), torch.zeros(64))  # stored as gamma - 1
        ref = torch.nn.LayerNorm(64) if norm_type == "LayerNorm" else torch.nn.RMSNorm(64)
        x = torch.randn(3, 64)
        assert torch.allclose(norm(x), ref(x), atol=1e-6)  # gamma = 1 + 0
        with torch.no_grad():
            norm.weight.fill_(0.5)
            ref.weight.fill_(1.5)
        assert torch.allclose(norm(x), ref(x), atol=1e-6)


def test_layernorm_1p_is_recorded_in_the_checkpoint_args_and_export_refuses_it():
    """(The local spec's use of mtk's norm is exercised by the CPU run in tests/integration/training/
    test_training_recipe_runs.py: megatron-core's own torch norm would refuse the config.)"""
    from mtk.training.interop import hf

    job = _job(cluster=CPU, model_={"layernorm_1p": True})
    args = megatron_lm.megatron_args(job, data_parallel_size=2, vocab_size=1000, padded_vocab_size=1024,
                                     consumed_train_samples=0, iteration=0)
    assert args.apply_layernorm_1p is True
    with pytest.raises(hf.ConversionError, match="zero-centred"):
        hf.hf_architecture(hf.shape_from_args(args))


# --------------------------------------------------------------------------- attention softmax dtype
def test_attention_softmax_in_fp32_reaches_the_config_and_the_checkpoint_args_as_megatron_lm_defaults_it():
    """Off by default like Megatron-LM's --attention-softmax-in-fp32 (megatron-core's TransformerConfig default is
    on: mtk left it on and ran a GPT-125M 16% slower than pretrain_gpt.py on an H200, losses apart by 1e-3)."""
    assert _tc(_job()).attention_softmax_in_fp32 is False
    assert _tc(_job(model_={"attention_softmax_in_fp32": True})).attention_softmax_in_fp32 is True
    for on in (False, True):
        job = _job(cluster=CPU, model_={"attention_softmax_in_fp32": on})
        args = megatron_lm.megatron_args(job, data_parallel_size=1, vocab_size=1000, padded_vocab_size=1024,
                                         consumed_train_samples=0, iteration=0)
        assert args.attention_softmax_in_fp32 is on
        assert ("--attention-softmax-in-fp32" in megatron_lm.pretrain_gpt_argv(args, job, "/ckpt")) is on


# --------------------------------------------------------------------------- per-token loss
def test_per_token_loss_reaches_the_config_and_weights_micro_batches_by_tokens(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")  # the loop's accumulator device, here
    assert _tc(_job(train={"per_token_loss": True})).calculate_per_token_loss is True
    assert _tc(_job()).calculate_per_token_loss is False
    losses = [torch.tensor([[1.0, 1.0, 1.0, 1.0]]), torch.tensor([[3.0, 3.0, 3.0, 3.0]])]
    masks = [torch.tensor([[1.0, 1.0, 1.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0, 0.0]])]
    per_token = [loop.loss_func(m, out, per_token=True) for m, out in zip(masks, losses, strict=True)]
    assert [int(n) for _, n, _ in per_token] == [4, 1]
    assert [float(s) for s, _, _ in per_token] == [4.0, 3.0]  # sums: the schedule leaves them undivided
    logged = loop._loss_sum([d for _, _, d in per_token])
    assert logged[0] / logged[1] == pytest.approx(7.0 / 5)  # token-weighted
    per_mb = loop._loss_sum([loop.loss_func(m, out)[1] for m, out in zip(masks, losses, strict=True)])
    assert per_mb[0] / per_mb[1] == pytest.approx((1.0 + 3.0) / 2)  # mean of micro-batch means


# --------------------------------------------------------------------------- NaN check
def test_nan_check_on_by_default_off_with_fp16_and_refused_there():
    assert optim.ddp_config(_job(), _plan(_job())).check_for_nan_in_grad is True
    cpu = _job(cluster=CPU)
    assert optim.ddp_config(cpu, _plan(cpu, gpu=False)).check_for_nan_in_grad is True
    fp16 = _job(train={"precision": "fp16"})
    assert optim.ddp_config(fp16, _plan(fp16)).check_for_nan_in_grad is False
    off = _job(train={"check_nan_in_grad": False})
    assert optim.ddp_config(off, _plan(off)).check_for_nan_in_grad is False
    with pytest.raises(SpecError, match=r"train.check_nan_in_grad .*loss scaler"):
        _job(train={"precision": "fp16", "check_nan_in_grad": True})


# --------------------------------------------------------------------------- what mtk validate prints
def test_device_plan_and_validate_lines_print_the_recipe():
    job = _job(train={**FP8, "decoupled_lr": 5e-4, "decoupled_min_lr": 4.5e-5, "per_token_loss": True,
                      "manual_gc_interval": 100}, model_={"layernorm_1p": True}, parallel=DIST)
    text = "\n".join(device_plan.describe_for_validate(job))
    for expected in ("grad reduce: bf16", "fp8 param gather", "NaN grad check: on", "cross-entropy",
                     "fp8 hybrid/delayed, amax history 1024 (max)", "embedding/output LR 0.0005 -> 4.5e-05",
                     "layernorm-1p on", "loss per token of the global batch",
                     "manual GC at start, around evaluation and every 100 iterations"):
        assert expected in text, (expected, text)
    cpu = "\n".join(device_plan.describe_for_validate(_job(cluster=CPU)))
    assert "grad reduce: fp32" in cpu and "layernorm-1p off" in cpu and "loss per micro-batch" in cpu


def test_megatron_lm_args_carry_the_recipe_flags():
    job = _job(train={**FP8, "decoupled_lr": 5e-4, "decoupled_min_lr": 4.5e-5, "per_token_loss": True},
               model_={"layernorm_1p": True}, parallel=DIST)
    args = megatron_lm.megatron_args(job, data_parallel_size=8, vocab_size=1000, padded_vocab_size=1024,
                                     consumed_train_samples=0, iteration=0)
    argv = megatron_lm.pretrain_gpt_argv(args, job, "/ckpt")
    joined = " ".join(argv)
    for flag in ("--apply-layernorm-1p", "--fp8-format hybrid", "--fp8-recipe delayed", "--fp8-amax-history-len 1024",
                 "--fp8-amax-compute-algo max", "--fp8-param-gather", "--grad-reduce-in-bf16",
                 "--cross-entropy-loss-fusion", "--calculate-per-token-loss", "--manual-gc",
                 "--decoupled-lr 0.0005", "--decoupled-min-lr 4.5e-05"):
        assert flag in joined, flag
    assert "--no-check-for-nan-in-loss-and-grad" not in joined
    off = _job(cluster=CPU, train={"check_nan_in_grad": False, "manual_gc": False})
    off_argv = " ".join(megatron_lm.pretrain_gpt_argv(megatron_lm.megatron_args(
        off, data_parallel_size=2, vocab_size=1000, padded_vocab_size=1024, consumed_train_samples=0, iteration=0),
        off, "/ckpt"))
    assert "--no-check-for-nan-in-loss-and-grad" in off_argv and "--manual-gc" not in off_argv
    assert "--grad-reduce-in-bf16" not in off_argv and "--cross-entropy-loss-fusion" not in off_argv


_DDP_FROM_MEGATRON_LM = """
import json, sys, typing
if not hasattr(typing, "override"):
    typing.override = lambda f: f
from mtk.training import compat
compat.install()
from megatron.training import arguments, training
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    sys.argv = ["pretrain_gpt.py", *argv]
    out[name] = training.get_megatron_ddp_config(arguments.parse_args()).fp8_param_gather
print(json.dumps(out))
"""


def test_fp8_param_gather_reaches_the_ddp_config_as_megatron_lm_sets_it():
    """Megatron-LM sets ``DistributedDataParallelConfig.fp8_param_gather`` from --fp8-param-gather (the
    distributed optimizer's copy of main params into the model branches on it); mtk's DDP config carries the
    same value, read here through Megatron-LM's own parser and ``get_megatron_ddp_config``."""
    import subprocess
    import sys

    jobs = {"on": _job(train=FP8, parallel=DIST),
            "off": _job(train={**FP8, "fp8": {"param_gather": False}}, parallel=DIST),
            "bf16": _job(train={"precision": "bf16"}, parallel=DIST)}
    argvs = {name: [str(a) for a in megatron_lm.pretrain_gpt_argv(megatron_lm.megatron_args(
        job, data_parallel_size=8, vocab_size=1000, padded_vocab_size=1024, consumed_train_samples=0, iteration=0),
        job, "/ckpt")] for name, job in jobs.items()}
    proc = subprocess.run([sys.executable, "-c", _DDP_FROM_MEGATRON_LM, json.dumps(argvs)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = {name: optim.ddp_config(job, _plan(job)).fp8_param_gather for name, job in jobs.items()}
    assert ours == theirs == {"on": True, "off": False, "bf16": False}
