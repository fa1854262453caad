"""The reshard rules on common states built the way mtk writes them (no processes, no tensors)."""

from __future__ import annotations

import pytest
from mtk.training import checkpoint, reshard
from mtk.training.interop import megatron_lm

from mtk.spec.loader import apply_overrides, validate
from mtk.vocabulary import padded_vocab


def _job(*sets: str):
    base = {"name": "t", "model": {"preset": "tiny"}, "cluster": {"procs_per_node": 4}, "train": {"precision": "fp32"}}
    return validate(apply_overrides(base, list(sets)))


def _common(*sets: str) -> dict:
    """The common state a run of ``sets`` writes (args, mtk extras, content metadata)."""
    job = _job(*sets)
    p = job.parallel
    dp = job.cluster.world_size // (p.tp * p.pp * p.cp)
    common = checkpoint.common_state(job, iteration=2, consumed_samples=16, data_parallel_size=dp,
                                     vocab_size=job.model.vocab_size,
                                     padded_vocab_size=padded_vocab(job.model.vocab_size,
                                                                    job.model.make_vocab_size_divisible_by, p.tp),
                                     flops_so_far=0.0)
    common["content_metadata"] = megatron_lm.content_metadata(
        p.distributed_optimizer, common["args"].dist_ckpt_optim_fully_reshardable)
    return common


def test_unchanged_layout_is_no_reshard_and_keeps_rng():
    plan = reshard.plan(_common("parallel.tp=2"), _job("parallel.tp=2"), "ckpt")
    assert not plan.resharding and plan.restore_rng


@pytest.mark.parametrize(("saved", "now", "changed", "rng"), [
    (("parallel.tp=2",), ("parallel.tp=1",), {"parallel.tp": (2, 1), reshard.DP_SIZE: (2, 4)}, False),
    (("parallel.tp=1", "parallel.pp=2"), ("parallel.tp=1",), {"parallel.pp": (2, 1), reshard.DP_SIZE: (2, 4)}, False),
    (("parallel.tp=2",), ("parallel.tp=2", "cluster.procs_per_node=2"), {reshard.DP_SIZE: (2, 1)}, True),
])
def test_plain_optimizer_reshards_any_layout(saved, now, changed, rng):
    plan = reshard.plan(_common(*saved), _job(*now), "ckpt")
    assert plan.changed == changed and plan.restore_rng is rng and plan.distopt_sharding is None


def test_dp_reshardable_is_the_default_as_in_megatron_lm():
    common = _common("parallel.tp=1", "parallel.distributed_optimizer=true")
    assert common["content_metadata"]["distrib_optim_sharding_type"] == "dp_reshardable"
    assert common["args"].dist_ckpt_optim_fully_reshardable is False


def test_fully_reshardable_reshards_tp_pp():
    common = _common("parallel.tp=1", "parallel.distributed_optimizer=true", "train.checkpoint.fully_reshardable=true")
    assert common["content_metadata"]["distrib_optim_sharding_type"] == "fully_reshardable"
    now = _job("parallel.tp=2", "parallel.pp=2", "parallel.distributed_optimizer=true")
    plan = reshard.plan(common, now, "c")
    assert plan.distopt_sharding == "fully_reshardable" and set(plan.changed) == {"parallel.tp", "parallel.pp",
                                                                                 reshard.DP_SIZE}


def test_dp_reshardable_reshards_dp_only_and_names_the_field_and_fix():
    common = _common("parallel.tp=1", "parallel.distributed_optimizer=true")
    ok = reshard.plan(common, _job("parallel.tp=1", "parallel.distributed_optimizer=true",
                                   "cluster.procs_per_node=2"), "ckpt")
    assert ok.changed == {reshard.DP_SIZE: (4, 2)} and ok.restore_rng
    with pytest.raises(reshard.ReshardRefused, match=r"^parallel\.pp: ckpt holds .* dp_reshardable .* written at "
                                                     r"parallel\.pp=1 .* train\.checkpoint\.fully_reshardable=true"
                                                     r".* train\.init_from"):
        reshard.plan(common, _job("parallel.tp=1", "parallel.pp=2", "parallel.distributed_optimizer=true"), "ckpt")


def test_megatron_lm_checkpoint_without_content_metadata_uses_its_fallback():
    common = _common("parallel.tp=2", "parallel.distributed_optimizer=true")
    del common["content_metadata"], common[megatron_lm.MTK_KEY]
    assert reshard.distopt_sharding(common) == "dp_zero_gather_scatter"
    with pytest.raises(reshard.ReshardRefused, match=r"^parallel\.tp: "):
        reshard.plan(common, _job("parallel.tp=1", "parallel.distributed_optimizer=true"), "ckpt")


def test_weights_only_checkpoint_skips_the_optimizer_rules():
    common = _common("parallel.tp=2", "parallel.distributed_optimizer=true")
    plan = reshard.plan(common, _job("parallel.tp=1"), "ckpt", optimizer_state=False)
    assert plan.distopt_sharding is None and "parallel.tp" in plan.changed


@pytest.mark.parametrize(("now", "field"), [
    (("model.num_layers=4",), "model.num_layers"),
    (("model.hidden_size=128",), "model.hidden_size"),
    (("parallel.distributed_optimizer=true",), "parallel.distributed_optimizer"),
    (("train.precision=bf16",), "train.precision"),
])
def test_impossible_resumes_name_the_field(now, field):
    with pytest.raises(reshard.ReshardRefused, match=rf"^{field}: "):
        reshard.plan(_common("parallel.tp=1"), _job("parallel.tp=1", *now), "ckpt")


def test_vocabulary_padding_that_changes_with_tp_is_refused_with_a_divisor_that_fits():
    saved = _common("parallel.tp=1", "model.vocab_size=1000")  # 1000 padded to 1024 (128 × tp 1)
    assert saved["args"].padded_vocab_size == 1024
    now = _job("parallel.tp=2", "model.vocab_size=1000", "model.make_vocab_size_divisible_by=384")  # → 1536
    with pytest.raises(reshard.ReshardRefused, match=r"^parallel\.tp: .* 1024 rows .* pads it to 1536.*"
                                                     r"model\.make_vocab_size_divisible_by=512 does"):
        reshard.plan(saved, now, "ckpt")


def test_another_expert_parallel_size_is_refused_with_optimizer_state_only():
    moe = ("parallel.tp=1", "model.moe.num_experts=4", "model.moe.router_topk=2", "model.add_bias_linear=false")
    common = _common(*moe, "parallel.ep=2")
    with pytest.raises(reshard.ReshardRefused, match=r"^parallel\.ep: .* parallel\.ep=2 .* parallel\.ep=1.*"
                                                     r"train\.init_from"):
        reshard.plan(common, _job(*moe, "parallel.ep=1"), "ckpt")
    assert reshard.plan(common, _job(*moe, "parallel.ep=1"), "ckpt", optimizer_state=False).changed == {
        "parallel.ep": (2, 1)}


# ------------------------------------------------------------------ the vocabulary the model was built with
# A run on its own tokenizer builds the model from the tokenizer's vocabulary, whatever model.vocab_size says
# (the tiny preset's 1024 here); the checkpoint must record that vocabulary and the resume must compare it.
OWN_BPE = 12000  # not a multiple of 128, not the preset's 1024: pads to 12032 at tp=2 (12288 at divisible 128×tp 4)


def _tokenizer_run(*sets: str, vocab: int = OWN_BPE, recorded: int | None = None) -> dict:
    """The common state a tp=2 run built on a ``vocab``-token tokenizer writes; ``recorded`` overrides the
    recorded args.vocab_size (mtk before the fix recorded model.vocab_size)."""
    job = _job("parallel.tp=2", *sets)
    padded = padded_vocab(vocab, job.model.make_vocab_size_divisible_by, job.parallel.tp)
    common = checkpoint.common_state(job, iteration=2, consumed_samples=16, data_parallel_size=2, vocab_size=vocab,
                                     padded_vocab_size=padded, flops_so_far=0.0)
    if recorded is not None:
        common["args"].vocab_size = recorded
    return common


def _tokenizer_job(*sets: str):
    return _job("parallel.tp=2", "data.tokenizer.type=HuggingFaceTokenizer", "data.tokenizer.model=tok.json", *sets)


def test_checkpoint_records_the_built_vocabulary_not_the_specs():
    args = _tokenizer_run()["args"]
    assert (args.vocab_size, args.padded_vocab_size) == (OWN_BPE, 12032)
    assert megatron_lm.recorded_vocab_size(args) == OWN_BPE


def test_a_run_on_its_own_tokenizer_resumes_its_own_checkpoint():
    plan = reshard.plan(_tokenizer_run(), _tokenizer_job(), "ckpt", vocab_size=OWN_BPE)
    assert not plan.resharding and plan.notes == ()


def test_a_checkpoint_that_recorded_the_specs_vocabulary_resumes_and_says_how():
    """Written by mtk at 853e4ca: args.vocab_size 1024 (the preset's) beside 12032 padded rows."""
    old = _tokenizer_run(recorded=1024)
    assert megatron_lm.recorded_vocab_size(old["args"]) is None
    plan = reshard.plan(old, _tokenizer_job(), "ckpt", vocab_size=OWN_BPE)
    assert len(plan.notes) == 1 and "vocab_size=1024" in plan.notes[0] and f"({OWN_BPE})" in plan.notes[0]


def test_the_reshard_rules_use_the_built_vocabulary():
    # 12000 pads to 12032 at tp=2 (multiple 256) and to 12288 at tp=4 (multiple 512): refused, naming the fix
    with pytest.raises(reshard.ReshardRefused, match=r"parallel.tp: .*vocabulary \(12000\) to 12032 .* pads it to "
                                                     r"12288"):
        reshard.plan(_tokenizer_run(), _tokenizer_job("parallel.tp=4", "cluster.procs_per_node=4"), "ckpt",
                     vocab_size=OWN_BPE)
    # the same, for the old checkpoint: its vocabulary is derived first, then the same rule applies
    with pytest.raises(reshard.ReshardRefused, match="pads it to 12288"):
        reshard.plan(_tokenizer_run(recorded=1024), _tokenizer_job("parallel.tp=4", "cluster.procs_per_node=4"),
                     "ckpt", vocab_size=OWN_BPE)
    # tp=1 pads 12000 to 12032 too (multiple 128): the embedding reshards
    plan = reshard.plan(_tokenizer_run(), _tokenizer_job("parallel.tp=1"), "ckpt", vocab_size=OWN_BPE)
    assert "parallel.tp" in plan.changed


def test_another_tokenizer_is_refused_naming_it():
    with pytest.raises(reshard.ReshardRefused, match=r"data.tokenizer: ckpt was trained with a vocabulary of 12000 "
                                                     r"tokens but this job's tokenizer has 12001"):
        reshard.plan(_tokenizer_run(), _tokenizer_job(), "ckpt", vocab_size=12001)


def test_hf_export_refuses_a_checkpoint_whose_recorded_vocabulary_is_wrong():
    from mtk.training.interop import hf

    assert hf.shape_from_args(_tokenizer_run()["args"]).vocab_size == OWN_BPE
    with pytest.raises(hf.ConversionError, match="vocab_size=1024, which does not pad to its 12032"):
        hf.shape_from_args(_tokenizer_run(recorded=1024)["args"])
