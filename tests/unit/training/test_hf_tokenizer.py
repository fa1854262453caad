"""Each tokenizer kind mtk trains with is written into an HF directory that transformers' AutoTokenizer loads
alone and that gives the training ids; ids that would be wrong are refused, unknown ones are null."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mtk.training.interop import hf_tokenizer

from mtk.spec.data import TokenizerSpec
from mtk.tokenizers import build_tokenizer

TEXTS = [f"def f{i}(x):\n    return x * {i}  # the quick brown fox, naïve café" for i in range(200)]
PROBES = ["def main(argv):\n    return 0", "naïve café <|endoftext|> done", " leading space", "x  =  1", "a\n\nb"]


def _bpe_files(d: Path, vocab: int = 300, special: str | None = None) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    d.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(d))
    if special:
        tok.add_special_tokens([special])
        tok.save(str(d / "tokenizer.json"))


def _sentencepiece(d: Path) -> None:
    import sentencepiece as spm

    d.mkdir(parents=True, exist_ok=True)
    (d / "corpus.txt").write_text("\n".join(TEXTS))
    spm.SentencePieceTrainer.train(input=str(d / "corpus.txt"), model_prefix=str(d / "sp"), vocab_size=400,
                                   model_type="bpe", byte_fallback=True, minloglevel=2,
                                   remove_extra_whitespaces=False, normalization_rule_name="identity")  # as Llama 2
    (d / "sp.model").rename(d / "tokenizer.model")


def _kind(tmp: Path, kind: str):
    src = tmp / "src"
    if kind == "GPT2BPETokenizer":
        _bpe_files(src)
        spec = TokenizerSpec(type=kind, vocab_file="vocab.json", merge_file="merges.txt")
    elif kind == "HuggingFaceTokenizer":
        _bpe_files(src, special="</s>")
        (src / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
        spec = TokenizerSpec(type=kind, model="tokenizer.json")
    else:
        _sentencepiece(src)
        spec = TokenizerSpec(type=kind, model="tokenizer.model")
    return build_tokenizer(spec, str(src))


@pytest.mark.parametrize("kind", ["GPT2BPETokenizer", "HuggingFaceTokenizer", "GPTSentencePieceTokenizer"])
def test_each_kind_exports_a_tokenizer_autotokenizer_loads_with_training_ids(tmp_path, kind):
    from transformers import AutoTokenizer

    ours = _kind(tmp_path, kind)
    rec = hf_tokenizer.record(ours)
    out = tmp_path / "hf"
    out.mkdir()
    ids = hf_tokenizer.write_hf(rec, out, vocab_size=ours.vocab_size, max_length=64)
    assert ids.eos == ours.eod
    theirs = AutoTokenizer.from_pretrained(str(out))
    assert theirs.eos_token_id == ours.eod
    if kind == "GPT2BPETokenizer":
        assert ids.bos == theirs.bos_token_id == ours.eod
    if kind == "GPTSentencePieceTokenizer":
        assert ids.bos == theirs.bos_token_id == ours.processor.bos_id()
    for text in PROBES:
        if kind == "GPTSentencePieceTokenizer" and text[0].isspace():
            # transformers' SentencePiece conversion (Metaspace, prepend "first") drops the dummy prefix
            # sentencepiece adds before a leading space: a known transformers difference, not the export's
            continue
        assert theirs(text).input_ids == ours.encode(text), (kind, text)


def test_hf_dir_record_rebuilds_the_same_ids(tmp_path):
    ours = _kind(tmp_path, "GPT2BPETokenizer")
    out = tmp_path / "hf"
    out.mkdir()
    hf_tokenizer.write_hf(hf_tokenizer.record(ours), out, vocab_size=ours.vocab_size, max_length=64)
    rec = hf_tokenizer.from_hf_dir(out)  # what `mtk convert HFDIR CKPT` records
    assert rec is not None and rec["type"] == "HuggingFaceTokenizer" and rec["eod"] == ours.eod
    again = hf_tokenizer.rebuild(rec, tmp_path / "again")
    assert [again.encode(t) for t in PROBES] == [ours.encode(t) for t in PROBES]
    assert hf_tokenizer.from_hf_dir(tmp_path / "src" / "nothing-here") is None


def test_an_eos_outside_the_model_vocabulary_is_refused_and_no_tokenizer_gives_null_ids(tmp_path):
    ours = _kind(tmp_path, "GPT2BPETokenizer")
    out = tmp_path / "hf"
    out.mkdir()
    with pytest.raises(hf_tokenizer.TokenizerExportError, match=r"data.tokenizer: .*EOS/EOD id 300 is outside .*200"):
        hf_tokenizer.write_hf(hf_tokenizer.record(ours), out, vocab_size=200, max_length=64)
    assert hf_tokenizer.write_hf(None, out, vocab_size=200, max_length=64) == hf_tokenizer.SpecialIds(None, None)
    assert hf_tokenizer.config_ids(hf_tokenizer.SpecialIds(None, None)) == {"bos_token_id": None,
                                                                            "eos_token_id": None}
