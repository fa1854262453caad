"""Configurations the engine refuses before building any process group, with the reason and the fix."""

from __future__ import annotations

import pytest
from mtk.training.loop import EngineError, preflight

from mtk.spec import Job


def _job(parallel=None, train=None) -> Job:
    return Job.model_validate({"name": "t", "model": {"preset": "tiny"}, "parallel": parallel or {},
                               "train": train or {}})


def test_context_parallel_needs_transformer_engine():
    """megatron.core 0.19.2's local DotProductAttention asserts context_parallel_size == 1."""
    with pytest.raises(EngineError, match=r"parallel\.cp=2: context parallelism needs Transformer Engine"):
        preflight(_job(parallel={"cp": 2}), cpu=True, use_te=False)
    preflight(_job(parallel={"cp": 2}), cpu=False, use_te=True)  # fine with TE


def test_fp8_needs_te_and_fp16_needs_a_gpu():
    with pytest.raises(EngineError, match=r"train\.precision=fp8 needs Transformer Engine"):
        preflight(_job(train={"precision": "fp8"}), cpu=False, use_te=False)
    with pytest.raises(EngineError, match=r"train\.precision=fp16 needs a GPU"):
        preflight(_job(train={"precision": "fp16"}), cpu=True, use_te=False)
    preflight(_job(train={"precision": "bf16"}), cpu=True, use_te=False)


def test_te_attention_asked_without_transformer_engine_is_refused_with_the_alternative():
    job = Job.model_validate({"name": "t", "model": {"preset": "tiny", "attention_backend": "te"}})
    with pytest.raises(EngineError, match=r"model\.attention_backend=te needs Transformer Engine.*auto"):
        preflight(job, cpu=False, use_te=False)
    preflight(job, cpu=False, use_te=True)
