"""The resumable sampler and the data-source resolution (no megatron import)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mtk.training import data

from mtk.spec import Job


def _all(total, consumed, mbs, dp):
    return [list(data.ResumableSampler(total, consumed, mbs, r, dp)) for r in range(dp)]


def test_ranks_split_each_step_without_overlap():
    r0, r1 = _all(16, 0, 2, 2)
    assert r0 == [[0, 1], [4, 5], [8, 9], [12, 13]]
    assert r1 == [[2, 3], [6, 7], [10, 11], [14, 15]]


@given(total=st.integers(1, 200), mbs=st.integers(1, 4), dp=st.integers(1, 4), cut=st.integers(0, 50))
def test_resume_continues_exactly_where_it_stopped(total, mbs, dp, cut):
    step = mbs * dp
    for rank in range(dp):
        full = list(data.ResumableSampler(total, 0, mbs, rank, dp))
        k = min(cut, len(full))
        resumed = list(data.ResumableSampler(total, k * step, mbs, rank, dp))
        assert resumed == full[k:]


def test_bad_rank_is_rejected():
    with pytest.raises(ValueError, match="dp_rank 2 out of range"):
        data.ResumableSampler(10, 0, 1, 2, 2)


def _job(**data_fields) -> Job:
    return Job.model_validate({"name": "t", "model": {"preset": "tiny"}, "data": {"dir": "/d", **data_fields}})


def test_blend_resolves_relative_prefixes_and_adds_corpus_outputs():
    job = _job(blend=[{"prefix": "a_text_document", "weight": 2}, {"prefix": "/abs/b", "weight": 1}],
               corpus={"input": "c.jsonl", "output_prefix": "out/c"},
               tokenizer={"type": "GPT2BPETokenizer", "vocab_file": "v", "merge_file": "m"})
    prefixes, weights = data.blend(job)
    assert prefixes == ["/d/a_text_document", "/abs/b", "/d/out/c_text_document"]
    assert weights == [2.0, 1.0, 1.0]


def test_mock_when_no_sources():
    assert data.blend(_job()) == ([], [])


def test_missing_prefix_names_the_file(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"x\.idx does not exist"):
        data.check_prefixes([str(tmp_path / "x")])


def test_cache_dir_default_and_override():
    assert data.cache_dir(_job()) == "/d/index-cache"
    assert data.cache_dir(_job(cache_dir="/fsx/cache")) == "/fsx/cache"


def test_split_sizes_cover_training_and_every_eval():
    job = Job.model_validate({"name": "t", "model": {"preset": "tiny"},
                              "train": {"iterations": 20, "global_batch_size": 8, "eval_interval": 10,
                                        "eval_iters": 2}})
    assert data.split_sizes(job) == [160, 3 * 2 * 8, 0]


def test_null_tokenizer_info_from_model_vocab():
    info = data.tokenizer_info(_job())
    assert info == data.TokenizerInfo(vocab_size=1024, eod=1023)
