"""The pretrain_gpt.py arguments mtk writes beside each checkpoint parse with Megatron-LM's own parser
(``megatron.training.arguments``, shipped in the megatron-core wheel), pass its ``validate_args`` and its loader's
``check_checkpoint_args``, and reproduce every model/parallel/optimizer field the checkpoint records — RoPE runs
carry ``--no-position-embedding`` (Megatron-LM's default add_position_embedding=True would refuse the
checkpoint). Whether pretrain_gpt.py then continues with mtk's losses is the on-demand test in
``tests/integration/training/megatron_lm``."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from mtk.training import checkpoint
from mtk.training.interop import megatron_lm
from support.megatron_args_file import read_args_file

from mtk import megatron_flags
from mtk.spec.loader import apply_overrides, validate
from mtk.vocabulary import padded_vocab

REPO = Path(__file__).resolve().parents[3]
LLAMA = ("model.arch=llama", "model.position_embedding=rope", "model.normalization=RMSNorm",
         "model.activation=swiglu", "model.add_bias_linear=false", "model.num_query_groups=2",
         "model.untie_embeddings=true", "model.rotary_base=500000", "model.norm_epsilon=1e-6")
CASES = {
    "gpt_tp2": ("parallel.tp=2", "model.vocab_size=1000"),
    "llama_hf_blend_distopt_bf16": (*LLAMA, "parallel.tp=1", "parallel.distributed_optimizer=true",
                                    "train.precision=bf16", "data.tokenizer.type=HuggingFaceTokenizer",
                                    "data.tokenizer.model=tok/tokenizer.json", "train.eval_interval=5"),
    "moe_ep2": ("parallel.tp=1", "parallel.ep=2", "model.moe.num_experts=4", "model.moe.router_topk=2"),
    # warmup as a fraction of a decay horizon shorter than the run: 0.3 × 8 iterations × 8 samples = 19.2 samples
    "gpt_warmup_fraction": ("parallel.tp=2", "train.lr_warmup_iters=0", "train.lr_warmup_fraction=0.3",
                            "train.lr_decay_iters=8"),
    # a growing global batch: 4 from sample 0, 6 from sample 4 (256 tokens ÷ seq 64), 8 from sample 10 (inside
    # iteration 2's samples); Megatron-LM then counts in samples (--train-samples, --lr-*-samples)
    "gpt_batch_schedule": ("parallel.tp=2", "train.batch_size_schedule=0:4 256:6 640:8", "train.lr_decay_iters=8",
                           "train.lr_warmup_iters=3"),
    "recipe_bf16": ("parallel.tp=2", "model.layernorm_1p=true", "train.precision=bf16", "train.grad_reduce_dtype=bf16",
                    "train.cross_entropy_fusion=true", "train.per_token_loss=true", "train.decoupled_lr=5e-4",
                    "train.decoupled_min_lr=4.5e-5", "train.manual_gc_interval=10", "train.check_nan_in_grad=false",
                    "train.recompute=full", "train.recompute_num_layers=2"),
}


def _job(tmp: Path, sets: tuple[str, ...]):
    data = {"name": "t", "cluster": {"nodes": 1, "procs_per_node": 2, "device": "cpu"}, "model": {"preset": "tiny"},
            "train": {"micro_batch_size": 2, "global_batch_size": 8, "iterations": 10, "lr_warmup_iters": 2}}
    if "model.arch=llama" in sets:  # a two-prefix blend
        data["data"] = {"blend": [{"prefix": "a_text_document", "weight": 0.3},
                                  {"prefix": "b_text_document", "weight": 0.7}]}
    return validate(apply_overrides(data, [f"data.dir={tmp}/data", *sets]))


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlm_args")
    cases, files, expected = [], {}, {}
    for name, sets in CASES.items():
        job = _job(tmp, sets)
        p = job.parallel
        vocab = 1500 if "llama" in name else job.model.vocab_size  # the tokenizer's, not the preset's
        args = megatron_lm.megatron_args(job, data_parallel_size=job.cluster.world_size // (p.tp * p.pp),
                                         vocab_size=vocab,
                                         padded_vocab_size=padded_vocab(vocab, job.model.make_vocab_size_divisible_by,
                                                                        p.tp),
                                         consumed_train_samples=16, iteration=2)
        argv = megatron_lm.pretrain_gpt_argv(args, job, str(tmp / name / "checkpoints"))
        files[name] = megatron_lm.args_file_text(argv, 2, job)
        expected[name] = _written_core(job)
        cases.append((name, files[name], args, job.cluster.world_size, sorted(expected[name])))
    (tmp / "cases.pkl").write_bytes(pickle.dumps(cases))
    res = subprocess.run([sys.executable, str(Path(__file__).parent / "megatron_lm" / "parse_args_file.py"),
                          str(tmp / "cases.pkl"), str(tmp / "out.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((tmp / "out.json").read_text()), files, tmp, expected


def _written_core(job) -> dict[str, object]:
    """What mtk's engine gives each megatron-core argument that a recorded or written row reaches (its configs and
    LR scheduler), for this job and the device plan its args file is written with."""
    from mtk.training.device_plan import plan

    device = plan(job, gpu=job.cluster.device == "gpu", te=False)
    owners = (megatron_flags.TC, megatron_flags.OC, megatron_flags.DDP, megatron_flags.SCHEDULER)
    return {target: flag.core_value(job, device) for flag in megatron_flags.FLAGS
            if flag.written in ("args", "record", "job") and megatron_flags.applies(flag, job, device)
            for target in flag.core if target.partition(".")[0] in owners}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.megatron  # Megatron-LM's own parser in a child (the module fixture)
def test_args_file_passes_megatron_lm_parser_and_checkpoint_checks(parsed, name):
    out, files, tmp, _expected = parsed
    r = out[name]
    assert r["error"] is None, r["error"]
    assert r["differ"] == {}, r["differ"]
    assert r["parsed"]["load"] == str(tmp / name / "checkpoints")
    assert not {"--override-opt-param-scheduler", "--no-load-optim", "--no-load-rng", "--finetune",
                "--use-checkpoint-args"} & set(read_args_file(files[name]))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser and argument code in a child
def test_each_written_flag_reaches_megatron_core_as_mtks_engine_sets_it(parsed, name):
    """The table's two directions agree with Megatron-LM's own code: every megatron-core argument a written (or
    recorded) row reaches — TransformerConfig, OptimizerConfig, DDP config, LR scheduler — has the value mtk's engine
    gives it (:func:`megatron_flags.core_kwargs`) when Megatron-LM builds it from the args file mtk wrote."""
    out, _files, _tmp, expected = parsed
    theirs = out[name]["core"]
    assert len(expected[name]) >= 40
    differ = {t: (ours, theirs[t]) for t, ours in expected[name].items() if ours != theirs[t]}
    assert differ == {}, differ
    assert theirs["TransformerConfig.layernorm_epsilon"] == (1e-6 if "llama" in name else 1e-5)


@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser and get_optimizer_param_scheduler in a child
def test_a_warmup_fraction_is_megatron_lms_fraction_of_the_decay_horizon(parsed, tmp_path):
    """train.lr_warmup_fraction reaches Megatron-LM as --lr-warmup-fraction (without --lr-warmup-iters, which it
    refuses beside it), and mtk's engine schedules the warmup Megatron-LM's own get_optimizer_param_scheduler
    computes from it: fraction × lr_decay_iters × global batch samples, not rounded to iterations."""
    import types

    from mtk.training import compat, optim

    compat.install()  # megatron-core's imports on this CPU host
    out, files, _tmp, _expected = parsed
    assert out["gpt_warmup_fraction"]["parsed"] is not None and out["gpt_warmup_fraction"]["error"] is None
    argv = read_args_file(files["gpt_warmup_fraction"])
    assert argv[argv.index("--lr-warmup-fraction") + 1] == "0.3" and "--lr-warmup-iters" not in argv
    theirs = out["gpt_warmup_fraction"]["core"]["OptimizerParamScheduler.lr_warmup_steps"]
    fake = types.SimpleNamespace(param_groups=[{"lr": 0.0, "weight_decay": 0.0, "params": []}])
    ours = optim.build_scheduler(_job(tmp_path, CASES["gpt_warmup_fraction"]), fake)
    assert theirs == ours.lr_warmup_steps == pytest.approx(0.3 * 8 * 8)
    assert out["gpt_tp2"]["core"]["OptimizerParamScheduler.lr_warmup_steps"] == 2 * 8  # the iterations' case


@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser and its calculator in a child
def test_a_batch_schedule_reaches_megatron_lm_counted_in_samples(parsed, tmp_path):
    """train.batch_size_schedule reaches Megatron-LM as --step-batch-size-schedule (tokens) without
    --global-batch-size (which it refuses beside it), the run counted in samples: the calculator Megatron-LM builds
    has the thresholds mtk's engine calculator has; --train-samples gives Megatron-LM's update_train_iters the
    spec's iterations; the scheduler's warmup and decay are the samples those iterations consume, as mtk's engine
    counts them."""
    from mtk.training import compat, optim

    from mtk.batch_schedule import BatchSchedule

    out, files, _tmp, _expected = parsed
    r = out["gpt_batch_schedule"]
    argv = read_args_file(files["gpt_batch_schedule"])
    assert argv[argv.index("--step-batch-size-schedule") + 1] == "0:4 256:6 640:8"
    assert not {"--global-batch-size", "--train-iters", "--lr-decay-iters", "--lr-warmup-iters"} & set(argv)
    job = _job(tmp_path, CASES["gpt_batch_schedule"])
    ours = BatchSchedule.of(job)
    compat.install()
    engine = optim.batch_calculator(job, dp_size=1, rank=1)
    assert [tuple(step) for step in r["batch_schedule"]] == engine.schedule == list(ours.steps) == \
        [(0, 4), (4, 6), (10, 8)]
    p = r["parsed"]
    assert (p["train_iters"], p["train_samples"]) == (10, ours.samples(10)) == (10, 4 + 6 + 8 * 8)
    assert (p["lr_decay_samples"], p["lr_warmup_samples"]) == (ours.samples(8), ours.samples(3)) == (58, 18)
    assert (p["lr_decay_iters"], p["lr_warmup_iters"], p["global_batch_size"]) == (None, 0, 2)  # micro × dp
    theirs = r["core"]
    assert (theirs["OptimizerParamScheduler.lr_decay_steps"], theirs["OptimizerParamScheduler.lr_warmup_steps"]) == \
        (58, 18)


@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser in a child
def test_rope_runs_carry_no_position_embedding_and_learned_ones_do_not(parsed):
    out, files, _tmp, _expected = parsed
    llama = out["llama_hf_blend_distopt_bf16"]["parsed"]
    assert llama["position_embedding_type"] == "rope" and llama["add_position_embedding"] is False
    assert llama["rotary_base"] == 500000
    assert "  --no-position-embedding\n" in files["llama_hf_blend_distopt_bf16"]
    gpt = out["gpt_tp2"]["parsed"]
    assert gpt["position_embedding_type"] == "learned_absolute" and gpt["add_position_embedding"] is True
    assert "--no-position-embedding" not in files["gpt_tp2"]


@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser in a child
def test_recipe_settings_reach_megatron_lm_as_mtk_trains_them(parsed):
    """The args file continues a run with the numerics it trained with (#26): Megatron-LM's own parser and
    validate_args read every recipe flag back to the value mtk used."""
    out, _files, _tmp, _expected = parsed
    r = out["recipe_bf16"]["parsed"]
    assert r["layernorm_zero_centered_gamma"] is True and r["calculate_per_token_loss"] is True
    assert (r["decoupled_lr"], r["decoupled_min_lr"]) == (5e-4, 4.5e-5)
    assert r["accumulate_allreduce_grads_in_fp32"] is False  # --grad-reduce-in-bf16
    assert r["cross_entropy_loss_fusion"] is True
    assert (r["manual_gc"], r["manual_gc_interval"]) == (True, 10)
    assert r["check_for_nan_in_loss_and_grad"] is False
    assert (r["recompute_granularity"], r["recompute_method"], r["recompute_num_layers"]) == ("full", "uniform", 2)
    plain = out["gpt_tp2"]["parsed"]  # defaults on this CPU job: fp32 buffers, plain CE, NaN check on, manual GC
    assert plain["accumulate_allreduce_grads_in_fp32"] is True
    assert plain["cross_entropy_loss_fusion"] is False and plain["check_for_nan_in_loss_and_grad"] is True
    assert plain["manual_gc"] is True and plain["layernorm_zero_centered_gamma"] is False


@pytest.mark.megatron  # the module fixture runs Megatron-LM's parser in a child
def test_data_and_tokenizer_come_from_the_job(parsed):
    out, _files, tmp, _expected = parsed
    gpt, llama = out["gpt_tp2"]["parsed"], out["llama_hf_blend_distopt_bf16"]["parsed"]
    assert gpt["mock_data"] and gpt["tokenizer_type"] == "NullTokenizer" and gpt["vocab_size"] == 1000
    assert llama["tokenizer_type"] == "HuggingFaceTokenizer" and not llama["mock_data"]
    assert llama["data_path"] == ["0.3", f"{tmp}/data/a_text_document", "0.7", f"{tmp}/data/b_text_document"]
    assert out["moe_ep2"]["parsed"]["num_experts"] == 4


def test_args_file_is_written_beside_each_checkpoint(tmp_path):
    """CheckpointManager puts side files into iter_N with the checkpoint (the partial dir, then the rename)."""
    from mtk.training.checkpoint import PARTIAL_SUFFIX, iter_dir_name

    root = tmp_path / "checkpoints"
    (root / (iter_dir_name(3) + PARTIAL_SUFFIX)).mkdir(parents=True)
    text = megatron_lm.args_file_text(["--num-layers", "2", "--data-path", "1.0", "/d/x y"], 3, _job(tmp_path, ()))
    assert read_args_file(text) == ["--num-layers", "2", "--data-path", "1.0", "/d/x y"]
    manager = checkpoint.CheckpointManager(root)
    manager._side_files[3] = {megatron_lm.ARGS_FILE: text}

    class Rank0:
        @staticmethod
        def get_rank():
            return 0

    import torch.distributed as dist

    real = dist.get_rank
    dist.get_rank = Rank0.get_rank  # one process, no process group: rank 0's part of the publish
    try:
        manager._publish_rank0(3)
    finally:
        dist.get_rank = real
    assert (root / iter_dir_name(3) / megatron_lm.ARGS_FILE).read_text() == text
    assert checkpoint.read_tracker(root) == 3
