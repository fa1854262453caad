"""Checkpoint interop without processes: the HF reshapes, the architecture decision, Megatron-LM's args."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from mtk.training import checkpoint
from mtk.training.interop import hf, megatron_lm

from mtk.spec.loader import apply_overrides, validate

LLAMA = hf.Shape(num_layers=2, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4, num_query_groups=2,
                 kv_channels=16, vocab_size=1000, padded_vocab_size=1024, max_position_embeddings=64, rope=True,
                 rotary_base=10000.0, rmsnorm=True, swiglu=True, bias=False, untie=True, norm_epsilon=1e-6)
GPT = dataclasses.replace(LLAMA, num_query_groups=4, rope=False, rmsnorm=False, swiglu=False, bias=True,
                          untie=False, norm_epsilon=1e-5)


def test_qkv_split_follows_megatrons_grouped_layout():
    d, per = 16, 2  # 4 heads in 2 groups
    rows = torch.arange((per + 2) * d * 2).float().unsqueeze(1)  # row i holds the value i
    q, k, v = hf.to_hf("qkv", rows, LLAMA)
    # group 0 = rows [0, 64): q heads 0-1 (32 rows), k (16), v (16); group 1 = rows [64, 128)
    assert q[:, 0].tolist() == list(range(0, 32)) + list(range(64, 96))
    assert k[:, 0].tolist() == list(range(32, 48)) + list(range(96, 112))
    assert v[:, 0].tolist() == list(range(48, 64)) + list(range(112, 128))


@pytest.mark.parametrize("kind", ["copy", "vocab", "qkv", "gate_up", "conv1d", "qkv_conv1d"])
def test_reshapes_invert(kind):
    shape = GPT if kind == "qkv_conv1d" else LLAMA
    rows = {"vocab": 1024, "qkv": 128, "qkv_conv1d": 192, "gate_up": 192}.get(kind, 64)
    t = torch.randn(rows, 64)
    if kind == "vocab":
        t[1000:] = 0  # padding rows do not survive an export; import pads with zeros
    assert torch.equal(hf.from_hf(kind, hf.to_hf(kind, t, shape), shape), t)


def test_architecture_decision_and_refusals():
    assert hf.hf_architecture(LLAMA) == "LlamaForCausalLM"
    assert hf.hf_architecture(GPT) == "GPT2LMHeadModel"
    with pytest.raises(hf.ConversionError, match=r"lacks .*model.untie_embeddings=false"):
        hf.hf_architecture(dataclasses.replace(GPT, untie=True))
    with pytest.raises(hf.ConversionError, match="mixture-of-experts"):
        hf.hf_architecture(dataclasses.replace(LLAMA, num_experts=4))
    with pytest.raises(hf.ConversionError, match="'MistralForCausalLM' is not supported"):
        hf.shape_from_hf_config({"architectures": ["MistralForCausalLM"]})
    with pytest.raises(hf.ConversionError, match="tanh GELU"):
        hf.shape_from_hf_config({"architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new"})


def test_hf_config_round_trips_the_shape():
    for shape in (LLAMA, GPT):
        arch = hf.hf_architecture(shape)
        back, arch2 = hf.shape_from_hf_config(hf.hf_config(shape, arch, "float32"))
        assert arch2 == arch
        assert back == shape


def _job(*sets):
    data = {"name": "t", "cluster": {"nodes": 1, "procs_per_node": 2, "device": "cpu"}, "model": {"preset": "tiny"},
            "parallel": {"tp": 2}}
    return validate(apply_overrides(data, list(sets)))


def test_megatron_args_carry_the_fields_megatron_lm_checks():
    job = _job("train.global_batch_size=16", "parallel.distributed_optimizer=true", "parallel.tp=1")
    args = megatron_lm.megatron_args(job, data_parallel_size=2, vocab_size=job.model.vocab_size,
                                     padded_vocab_size=1024, consumed_train_samples=48, iteration=3)
    for name, want in {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "add_position_embedding": True,
                       "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "world_size": 2,
                       "data_parallel_size": 2, "consumed_train_samples": 48, "padded_vocab_size": 1024,
                       "use_distributed_optimizer": True, "global_batch_size": 16, "no_save_optim": False,
                       "no_save_rng": False}.items():
        assert getattr(args, name) == want, name
    assert megatron_lm.content_metadata(True) == {"distrib_optim_sharding_type": "dp_reshardable",
                                                  "singleton_local_shards": False,
                                                  "chained_optim_avoid_prefix": True}
    common = {"args": args}
    assert megatron_lm.consumed_samples(common) == 48
    assert megatron_lm.saved_topology(common)["distributed_optimizer"] == 1
    assert megatron_lm.consumed_samples({"consumed_samples": 7}) == 7  # mtk's earlier layout


def test_release_tracker(tmp_path):
    (tmp_path / checkpoint.TRACKER).write_text("release\n")
    with pytest.raises(FileNotFoundError, match="release"):
        checkpoint.tracked_checkpoint(tmp_path)
    (tmp_path / "release").mkdir()
    assert checkpoint.tracked_checkpoint(tmp_path) == (tmp_path / "release", 0, True)
    assert checkpoint.read_tracker(tmp_path) == 0


def test_init_from_refuses_another_models_shape():
    job = _job()
    args = megatron_lm.megatron_args(_job("model.num_layers=3"), data_parallel_size=1, vocab_size=1000,
                                     padded_vocab_size=1024, consumed_train_samples=0, iteration=1)
    with pytest.raises(RuntimeError, match=r"train.init_from: .* num_layers=3 but this job has model.num_layers=2"):
        checkpoint.check_same_model("ck", {"args": args}, job, 1024, "train.init_from")


def test_init_from_ignores_megatron_lms_query_groups_without_gqa():
    job = _job()
    args = megatron_lm.megatron_args(job, data_parallel_size=1, vocab_size=job.model.vocab_size,
                                     padded_vocab_size=1024, consumed_train_samples=0, iteration=1)
    args.group_query_attention, args.num_query_groups = False, 1  # Megatron-LM's defaults for plain MHA
    checkpoint.check_same_model("ck", {"args": args}, job, 1024, "train.init_from")  # no error
    args.group_query_attention = True  # the same count with GQA on is another model: refused
    with pytest.raises(RuntimeError, match=r"train.init_from: .* num_query_groups=1 but this job has model"):
        checkpoint.check_same_model("ck", {"args": args}, job, 1024, "train.init_from")


def test_export_vocabulary_is_the_recorded_tokenizers():
    """A checkpoint written before args.vocab_size recorded the tokenizer's vocabulary (it held the spec's 1024
    while the embedding was built for 1,501 tokens) exports the tokenizer's rows; an impossible record is refused."""
    from pathlib import Path

    notes: list[str] = []
    old = dataclasses.replace(GPT, vocab_size=1024, padded_vocab_size=1536)
    fixed = hf._vocab_of_tokenizer(old, {"vocab_size": 1501}, Path("ckpt"), notes.append)
    assert fixed.vocab_size == 1501 and fixed.padded_vocab_size == 1536
    assert "args.vocab_size=1024" in notes[0] and "1501" in notes[0]
    assert hf._vocab_of_tokenizer(old, None, Path("ckpt"), notes.append) is old
    with pytest.raises(hf.ConversionError, match="tokenizer has 2000 tokens but the model only 1536"):
        hf._vocab_of_tokenizer(old, {"vocab_size": 2000}, Path("ckpt"), notes.append)


def test_the_norm_epsilon_travels_from_the_spec_through_the_checkpoint_to_hugging_face_and_back():
    """model.norm_epsilon is recorded in the checkpoint's args under Megatron-LM's name, exported as the HF config's
    rms_norm_eps / layer_norm_epsilon and read back from it; a checkpoint or config that does not say keeps what its
    writer used (mtk's default before the field existed; transformers' class default)."""
    job = _job("model.norm_epsilon=1e-6", "model.position_embedding=rope", "model.normalization=RMSNorm",
               "model.activation=swiglu", "model.add_bias_linear=false", "model.untie_embeddings=true")
    args = megatron_lm.megatron_args(job, data_parallel_size=1, vocab_size=1000, padded_vocab_size=1024,
                                     consumed_train_samples=0, iteration=1)
    assert args.layernorm_epsilon == 1e-6  # --norm-epsilon's argparse name
    shape = hf.shape_from_args(args)
    assert shape.norm_epsilon == 1e-6
    cfg = hf.hf_config(shape, hf.hf_architecture(shape), "float32")
    assert cfg["rms_norm_eps"] == 1e-6 and hf.shape_from_hf_config(cfg)[0].norm_epsilon == 1e-6
    assert hf.hf_config(GPT, "GPT2LMHeadModel", "float32")["layer_norm_epsilon"] == GPT.norm_epsilon
    del args.layernorm_epsilon  # a checkpoint written before the field: it trained with the spec's default
    assert hf.shape_from_args(args).norm_epsilon == 1e-5
    del cfg["rms_norm_eps"]  # transformers' LlamaConfig default
    assert hf.shape_from_hf_config(cfg)[0].norm_epsilon == 1e-6


def test_an_imported_models_args_are_the_tables_model_layout_and_checkpoint_rows():
    args = vars(hf.megatron_args_for(LLAMA))
    want = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 96, "num_attention_heads": 4, "num_query_groups": 2,
            "group_query_attention": True, "kv_channels": 16, "max_position_embeddings": 64, "seq_length": 64,
            "position_embedding_type": "rope", "add_position_embedding": False, "use_rotary_position_embeddings": True,
            "rotary_base": 10000, "rotary_percent": 1.0, "normalization": "RMSNorm", "layernorm_epsilon": 1e-6,
            "swiglu": True, "add_bias_linear": False, "add_qkv_bias": False,
            "untie_embeddings_and_output_weights": True, "vocab_size": 1000, "padded_vocab_size": 1024,
            "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "world_size": 1,
            "data_parallel_size": 1, "ckpt_format": "torch_dist", "use_dist_ckpt": True, "no_save_optim": True,
            "no_save_rng": True, "consumed_train_samples": 0, "num_experts": None, "use_distributed_optimizer": False}
    assert {k: args.get(k) for k in want} == want
    assert not {"lr", "train_iters", "bf16", "tokenizer_type", "seed"} & set(args)  # no training settings: weights only
