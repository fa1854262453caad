"""TransformerConfig arguments from the job spec (plain data; megatron is not imported)."""

from __future__ import annotations

from mtk.training import model
from mtk.training.debug import _redact

from mtk.spec import Job
from mtk.vocabulary import padded_vocab


def _job(model_: dict | None = None, **sections) -> Job:
    return Job.model_validate({"name": "t", "model": {"preset": "tiny", **(model_ or {})}, **sections})


def test_gpt_tiny_config():
    kw = model.transformer_config_kwargs(_job(parallel={"tp": 2}), cpu=True)
    assert kw["num_layers"] == 2 and kw["hidden_size"] == 64 and kw["ffn_hidden_size"] == 256
    assert kw["tensor_model_parallel_size"] == 2 and kw["use_cpu_initialization"] is True
    assert kw["gated_linear_unit"] is False and kw["normalization"] == "LayerNorm"
    assert kw["bias_dropout_fusion"] is False and kw["masked_softmax_fusion"] is False
    assert "recompute_granularity" not in kw and "num_moe_experts" not in kw


def test_llama_preset_maps_to_swiglu_rmsnorm_gqa():
    import torch.nn.functional as F

    kw = model.transformer_config_kwargs(_job({"preset": "llama3-8b"}), cpu=False)
    assert kw["gated_linear_unit"] is True and kw["activation_func"] is F.silu
    assert kw["normalization"] == "RMSNorm" and kw["num_query_groups"] == 8
    assert kw["add_bias_linear"] is False and kw["params_dtype"].__repr__() == "torch.bfloat16"


def test_recompute_and_moe_and_precision():
    full = model.transformer_config_kwargs(_job(train={"recompute": "full", "recompute_num_layers": 2,
                                                       "precision": "fp32"}), cpu=True)
    assert (full["recompute_granularity"], full["recompute_method"], full["recompute_num_layers"]) == \
        ("full", "uniform", 2)
    assert full["bf16"] is False
    moe = model.transformer_config_kwargs(_job({"moe": {"num_experts": 4, "router_topk": 2}},
                                               parallel={"ep": 2}), cpu=True)
    assert moe["num_moe_experts"] == 4 and moe["moe_router_topk"] == 2
    assert moe["expert_model_parallel_size"] == 2 and moe["moe_token_dispatcher_type"] == "alltoall"
    sel = model.transformer_config_kwargs(_job(train={"recompute": "selective"}), cpu=True)
    assert sel["recompute_granularity"] == "selective"


def test_vocab_padding_matches_the_launcher_figures():
    job = _job({"vocab_size": 50257}, parallel={"tp": 4})
    assert model.model_vocab_size(job) == padded_vocab(50257, 128, 4) == 50688
    assert model.model_vocab_size(job, 32000 + 3) == 32256


def test_env_dump_redacts_secret_looking_names():
    env = _redact({"HF_TOKEN": "abc", "AWS_SECRET_ACCESS_KEY": "x", "NCCL_DEBUG": "INFO", "PATH": "/bin"})
    assert env["HF_TOKEN"].startswith("<redacted>") and env["AWS_SECRET_ACCESS_KEY"].startswith("<redacted>")
    assert env["NCCL_DEBUG"] == "INFO"
