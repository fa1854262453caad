"""Exactness: ids equal each reference library's, and .bin/.idx bytes equal Megatron's IndexedDatasetBuilder."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from mtk.data_jobs.preprocess import PreprocessConfig, preprocess

from mtk.spec.data import TokenizerSpec
from mtk.tokenizers import build_tokenizer


def _run(tmp: Path, corpus: Path, spec: TokenizerSpec, data_dir: Path, **kw) -> tuple[bytes, bytes, dict]:
    cfg = PreprocessConfig(input=str(corpus), output_prefix=str(tmp / "out" / "c"), tokenizer=spec,
                           data_dir=str(data_dir), workers=1, progress=False, **kw)
    summary = preprocess(cfg, log=lambda _m: None)
    bin_path, idx_path = cfg.output_paths("text")
    return Path(bin_path).read_bytes(), Path(idx_path).read_bytes(), summary


def _with_eod(ids_per_doc: list[list[int]], eod: int) -> list[list[int]]:
    return [[*ids, eod] if ids else [] for ids in ids_per_doc]


@pytest.fixture(scope="module")
def hf_gpt2(bpe_dir):
    """Current Megatron's GPT2BPETokenizer: transformers' fast GPT-2 tokenizer from the two files."""
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(str(bpe_dir))


@pytest.mark.parametrize("engine", ["auto", "hf"])
def test_gpt2_bpe_ids_and_bytes_equal_megatron(tmp_path, bpe_dir, edge_docs, hf_gpt2, megatron_write,
                                               write_jsonl, engine):
    corpus = write_jsonl(tmp_path / "edge.jsonl", edge_docs)
    spec = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    got_bin, got_idx, summary = _run(tmp_path, corpus, spec, bpe_dir, engine=engine)

    eod = hf_gpt2.convert_tokens_to_ids("<|endoftext|>")
    ref_ids = [hf_gpt2(d)["input_ids"] for d in edge_docs]
    assert ref_ids[10].count(eod) == 2, "a literal <|endoftext|> must be the EOD id in current Megatron"
    want_bin, want_idx = megatron_write(_with_eod(ref_ids, eod), np.uint16, str(tmp_path / "ref"))
    assert got_bin == want_bin
    assert got_idx == want_idx
    assert summary["engine"] == ("FastGPT2" if engine == "auto" else "HFTokenizer")
    assert summary["docs"] == len(edge_docs) and summary["empty_docs"] == 3
    assert build_tokenizer(spec, str(bpe_dir)).vocab_size == len(hf_gpt2)


@lru_cache
def _openai_bpe(vocab_path: str, merges_path: str):
    """OpenAI's original GPT-2 encoder (what old Megatron used): a literal <|endoftext|> is plain text."""
    import regex

    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_enc = dict(zip(bs, map(chr, cs), strict=True))
    encoder = json.loads(Path(vocab_path).read_text())
    lines = Path(merges_path).read_text(encoding="utf-8").split("\n")[1:-1]
    ranks = {tuple(m.split()): i for i, m in enumerate(lines)}
    pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def bpe(token: str) -> list[str]:
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(text: str) -> list[int]:
        ids = []
        for piece in pat.findall(text):
            ids += [encoder[t] for t in bpe("".join(byte_enc[b] for b in piece.encode("utf-8")))]
        return ids

    return encode, encoder["<|endoftext|>"]


@pytest.mark.parametrize("engine", ["auto", "hf"])
def test_legacy_eod_as_text_matches_the_old_encoder(tmp_path, bpe_dir_legacy, edge_docs, megatron_write,
                                                    write_jsonl, engine):
    docs = [d for d in edge_docs if len(d) < 5000]  # the pure-Python reference is slow on the 1 MB doc
    corpus = write_jsonl(tmp_path / "edge.jsonl", docs)
    spec = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt",
                         legacy_eod_as_text=True)
    got_bin, got_idx, _ = _run(tmp_path, corpus, spec, bpe_dir_legacy, engine=engine)
    encode, eod = _openai_bpe(str(bpe_dir_legacy / "vocab.json"), str(bpe_dir_legacy / "merges.txt"))
    ref_ids = [encode(d) for d in docs]
    assert eod not in ref_ids[10], "legacy: a literal <|endoftext|> is split like text"
    want_bin, want_idx = megatron_write(_with_eod(ref_ids, eod), np.uint16, str(tmp_path / "ref"))
    assert got_bin == want_bin
    assert got_idx == want_idx


def test_huggingface_tokenizer_json_matches_tokenizers(tmp_path, edge_docs, megatron_write, write_jsonl):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(edge_docs[:-2] * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))

    corpus = write_jsonl(tmp_path / "edge.jsonl", edge_docs)
    spec = TokenizerSpec(type="HuggingFaceTokenizer", model="tokenizer.json")
    got_bin, got_idx, _ = _run(tmp_path, corpus, spec, tmp_path)
    ref = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ref_ids = [ref.encode(d).ids for d in edge_docs]  # add_special_tokens=True, like tokenizer(text).input_ids
    assert ref_ids[0][0] == 1 and ref_ids[11] == [1], "the template adds <s>, even to an empty document"
    want_bin, want_idx = megatron_write(_with_eod(ref_ids, ref.token_to_id("</s>")), np.uint16,
                                        str(tmp_path / "ref"))
    assert got_bin == want_bin
    assert got_idx == want_idx


def test_sentencepiece_matches_the_library(tmp_path, edge_docs, megatron_write, write_jsonl):
    import sentencepiece as spm

    (tmp_path / "train.txt").write_text("\n".join(d.replace("\r", " ") for d in edge_docs[:-2] * 30 if d))
    spm.SentencePieceTrainer.train(input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=600, model_type="bpe", character_coverage=0.9995,
                                   byte_fallback=True, minloglevel=2)
    corpus = write_jsonl(tmp_path / "edge.jsonl", edge_docs)
    spec = TokenizerSpec(type="GPTSentencePieceTokenizer", model="sp.model")
    got_bin, got_idx, _ = _run(tmp_path, corpus, spec, tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    ref_ids = [sp.encode_as_ids(d) for d in edge_docs]
    want_bin, want_idx = megatron_write(_with_eod(ref_ids, sp.eos_id()), np.uint16, str(tmp_path / "ref"))
    assert got_bin == want_bin
    assert got_idx == want_idx


def test_output_reads_back_with_megatron_indexed_dataset(tmp_path, bpe_dir, edge_docs, hf_gpt2,
                                                         megatron_indexed, write_jsonl):
    corpus = write_jsonl(tmp_path / "edge.jsonl", edge_docs)
    spec = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    _run(tmp_path, corpus, spec, bpe_dir, append_eod=False)
    ds = megatron_indexed.IndexedDataset(str(tmp_path / "out" / "c_text_document"))
    ref = [hf_gpt2(d)["input_ids"] for d in edge_docs]
    non_empty = [r for r in ref if r]
    assert len(ds) == len(non_empty)
    for i, ids in enumerate(non_empty):
        assert ds[i].tolist() == ids
    assert ds.document_indices.tolist() == [0, *np.cumsum([1 if r else 0 for r in ref]).tolist()]
