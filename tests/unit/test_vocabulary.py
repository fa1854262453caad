"""The vocabulary validate plans with is the one the engine builds: counted from the tokenizer's files with the
standard library, it equals what the tokenizer libraries (``mtk.tokenizers.build_tokenizer``, the engine's) give —
for the demo's 1,024-token BPE, a GPT-2-sized one, a tokenizer.json and a SentencePiece model — and the figures,
the memory gate and the megatron-core check's cache key follow it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support.journey_local import stdlib_docs, train_hf_tokenizer_json, train_sentencepiece

from mtk import vocabulary
from mtk.figures import compute, parameter_counts
from mtk.spec import validate
from mtk.tokenizers import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
GPT2_DIGEST = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


def _demo_module():
    spec = importlib.util.spec_from_file_location("make_demo_data", ROOT / "examples" / "make_demo_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_bpe(tmp_path_factory) -> Path:
    """The demo's own tokenizer, made as ``make demo-data`` makes it (1,024 tokens, <|endoftext|> id 0)."""
    demo = _demo_module()
    out = tmp_path_factory.mktemp("demo")
    assert demo.train_tokenizer(demo.documents(), out) == 1024
    return out


@pytest.fixture(scope="module")
def gpt2_sized_bpe(tmp_path_factory) -> Path:
    """A byte-level BPE with GPT-2's vocabulary size: 256 byte tokens, 50,000 merges and <|endoftext|>."""
    out = tmp_path_factory.mktemp("gpt2-sized")
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(merges) == 50000:
                break
            merges.append(f"{a} {b}")
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab))
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return out


def _job(data: dict, tp: int = 1, **model) -> object:
    return validate({"name": "v", "model": {"preset": "tiny", **model},
                     "cluster": {"nodes": 1, "procs_per_node": tp, "device": "cpu"}, "parallel": {"tp": tp},
                     "train": {"global_batch_size": 8, "micro_batch_size": 1}, "data": data})


def _bpe(folder: Path, **tok) -> dict:
    return {"dir": str(folder), "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "vocab.json",
                                              "merge_file": "merges.txt", **tok}}


def _library_size(job) -> int:
    return build_tokenizer(job.data.tokenizer, job.data.dir).vocab_size


def test_demo_bpe_counts_as_the_library_builds_it(demo_bpe):
    job = _job(_bpe(demo_bpe), tp=2, vocab_size=512)
    v = vocabulary.built(job)
    assert (v.size, v.padded, v.known) == (_library_size(job), 1024, True) == (1024, 1024, True)
    assert vocabulary.built(job, _library_size(job)) == vocabulary.Vocabulary(1024, 1024, "the tokenizer")
    assert "model.vocab_size (512) is not read with a tokenizer" in v.note(job)
    assert "1,024 tokens" in v.note(job)


def test_gpt2_sized_bpe_counts_as_the_library_builds_it(gpt2_sized_bpe):
    job = _job(_bpe(gpt2_sized_bpe), tp=8, vocab_size=128256, num_attention_heads=8)
    v = vocabulary.built(job)
    assert v.size == _library_size(job) == 50257
    assert v.padded == 51200  # 128 × tp 8 = 1,024: 50 × 1,024 = 51,200 ≥ 50,257
    legacy = _job(_bpe(gpt2_sized_bpe, legacy_eod_as_text=True), tp=8, num_attention_heads=8)
    assert vocabulary.built(legacy).size == _library_size(legacy) == 50257


def test_a_vocab_without_endoftext_gains_it_as_the_library_adds_it(tmp_path, demo_bpe):
    vocab = json.loads((demo_bpe / "vocab.json").read_text())
    del vocab["<|endoftext|>"]
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    merges = [line for line in (demo_bpe / "merges.txt").read_text().splitlines()
              if not line.startswith("#") and "".join(line.split(" ")) in vocab]
    (tmp_path / "merges.txt").write_text("\n".join(merges) + "\n")
    job = _job(_bpe(tmp_path))
    assert vocabulary.built(job).size == _library_size(job) == 1024  # 1,023 entries + the added special token


def test_tokenizer_json_and_sentencepiece_count_as_the_libraries_do(tmp_path):
    docs = stdlib_docs(40)
    train_hf_tokenizer_json(docs, tmp_path / "hf", 700)
    data = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
    data["added_tokens"].append({"id": 700, "content": "<pad>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(data))  # one added token beyond the model's vocab
    hf = _job({"dir": str(tmp_path / "hf"), "tokenizer": {"type": "HuggingFaceTokenizer", "model": "tokenizer.json"}})
    assert vocabulary.built(hf).size == _library_size(hf) == 701
    train_sentencepiece(docs, tmp_path / "sp", 600)
    sp = _job({"dir": str(tmp_path / "sp"),
               "tokenizer": {"type": "GPTSentencePieceTokenizer", "model": "tokenizer.model"}})
    assert vocabulary.built(sp).size == _library_size(sp) == 600


def test_files_not_here_take_a_pinned_known_file_or_say_the_size_is_unknown(tmp_path):
    fetch = [{"url": "https://example.org/gpt2/vocab.json", "path": "gpt2-vocab.json", "sha256": GPT2_DIGEST},
             {"url": "https://example.org/gpt2/merges.txt", "path": "gpt2-merges.txt", "sha256": "0" * 64}]
    data = {"dir": str(tmp_path / "absent"), "fetch": fetch,
            "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "gpt2-vocab.json", "merge_file": "gpt2-merges.txt"}}
    v = vocabulary.built(_job(data, tp=2))
    assert (v.size, v.padded, v.known) == (50257, 50432, True)
    assert "known by its sha256" in v.source
    data["fetch"][0]["sha256"] = "1" * 64
    job = _job(data, tp=2, vocab_size=3000)
    v = vocabulary.built(job)
    assert (v.size, v.padded, v.known) == (3000, 3072, False)
    assert "is not on this machine" in v.note(job) and "model.vocab_size (3,000) in its place" in v.note(job)


def test_without_a_tokenizer_the_spec_vocab_is_the_model_vocab():
    job = _job({}, tp=2, vocab_size=1000)
    v = vocabulary.built(job)
    assert (v.size, v.padded, v.known) == (1000, 1024, True) and v.note(job) == ""


def test_figures_count_the_tokenizer_vocabulary(demo_bpe):
    """The issue's case: the tiny preset at tp=2 with model.vocab_size=512 and the demo tokenizer. The embedding is
    the tokenizer's 1,024 rows (hidden 64): 512 × 64 more parameters than the spec's number would give."""
    job = _job(_bpe(demo_bpe), tp=2, vocab_size=512)
    mock = _job({}, tp=2, vocab_size=512)
    assert parameter_counts(job)[0] - parameter_counts(mock)[0] == (1024 - 512) * job.model.hidden_size
    assert compute(job).parameters == parameter_counts(job)[0]
    assert parameter_counts(job, vocabulary.built(mock))[0] == parameter_counts(mock)[0]


def test_the_check_cache_key_holds_the_built_vocabulary(demo_bpe, gpt2_sized_bpe):
    from mtk.launcher import megatron_cache as cache

    env = {"versions": {}, "python": "3", "mtk_source": "x"}
    demo, gpt2 = _job(_bpe(demo_bpe), tp=2), _job(_bpe(gpt2_sized_bpe), tp=2)
    assert demo.model == gpt2.model  # the spec's model section cannot tell them apart
    keys = {cache.key(cache.key_material(j, env, vocabulary.built(j).size)) for j in (demo, gpt2)}
    assert len(keys) == 2


def _gpt2_config(folder: Path, job, vocab: int) -> Path:
    m = job.model
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": m.num_layers, "n_embd": m.hidden_size,
        "n_inner": m.ffn, "n_head": m.num_attention_heads, "n_positions": m.max_positions, "vocab_size": vocab,
        "activation_function": "gelu"}))
    return folder


def test_init_from_an_hf_model_compares_the_built_vocabulary_not_the_spec_number(tmp_path, demo_bpe):
    """train.init_from an HF dir: the HF vocabulary must be the tokenizer's (what the model is built with);
    model.vocab_size, not read with a tokenizer, neither refuses a fitting model nor passes a misfit."""
    from mtk.training import init_from
    from mtk.training.interop.hf import ConversionError

    misfit = _job(_bpe(demo_bpe), vocab_size=2048)
    with pytest.raises(RuntimeError, match=r"the vocabulary \(data.tokenizer's\)=1024 \(the HF model has 2048\); "
                                           r"set the model fields to the HF model's and train with its tokenizer"):
        init_from._initialize_from_hf(_gpt2_config(tmp_path / "hf2048", misfit, 2048), [], misfit)
    fits = _job(_bpe(demo_bpe), vocab_size=512)
    with pytest.raises(ConversionError, match=r"has neither model\.safetensors"):  # past the shape check, to weights
        init_from._initialize_from_hf(_gpt2_config(tmp_path / "hf1024", fits, 1024), [], fits)
