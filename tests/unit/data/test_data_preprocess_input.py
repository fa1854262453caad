"""Bad input, the command lines (Megatron's flags and --job), shard invariance and the fast-engine guards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mtk.data_jobs import bpe_fast
from mtk.data_jobs.preprocess import PreprocessConfig, PreprocessError, preprocess
from mtk.data_jobs.preprocess_cli import main

from mtk.spec.data import TokenizerSpec

GPT2 = TokenizerSpec(type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")


def _cfg(tmp: Path, corpus: Path, data_dir: Path, **kw) -> PreprocessConfig:
    kw.setdefault("workers", 1)
    return PreprocessConfig(input=str(corpus), output_prefix=str(tmp / "out" / "c"), tokenizer=GPT2,
                            data_dir=str(data_dir), progress=False, **kw)


BAD_LINES = [
    (b'{"text": "fine"}\n{"text": "broken\n', "malformed JSON"),
    (b'{"text": "fine"}\n{"text": "\\ud800 lone"}\n', "lone surrogate"),
    (b'{"text": "fine"}\n{"body": "no text key"}\n', "missing key 'text'"),
    (b'{"text": "fine"}\n{"text": "caf\xe9"}\n', "not valid UTF-8"),
    (b'{"text": "fine"}\n{"text": 42}\n', "expected a string"),
    (b'{"text": "fine"}\n{"text": "' + b"y" * 20000 + b'"}\n', "longer than"),
]


@pytest.mark.parametrize(("content", "reason"), BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_bad_line_fails_with_file_and_line(tmp_path, bpe_dir, content, reason):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(b'{"text": "first"}\n' + content + b'{"text": "after"}\n')
    with pytest.raises(PreprocessError) as err:
        preprocess(_cfg(tmp_path, corpus, bpe_dir, max_doc_mb=0.01), log=lambda _m: None)
    assert f"{corpus}:3: " in str(err.value) and reason in str(err.value)
    assert not list((tmp_path / "out").glob("*.bin")), "no final output after a failure"


def test_skip_bad_lines_counts_every_skip(tmp_path, bpe_dir):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(b"".join(c for c, _ in BAD_LINES) + b"\n  \n")
    summary = preprocess(_cfg(tmp_path, corpus, bpe_dir, skip_bad_lines=True, max_doc_mb=0.01),
                         log=lambda _m: None)
    assert summary["skipped_lines"] == len(BAD_LINES)
    assert summary["docs"] == len(BAD_LINES)  # the "fine" line of each pair
    assert summary["blank_lines"] == 2
    assert any(":4: " in e for e in summary["skipped_examples"])
    assert summary["outputs"]["text"]["documents"] == len(BAD_LINES)


@pytest.mark.parametrize(("vocab", "merges", "needle"), [
    (None, "a b\n", "merges.txt"),  # merges missing entirely
    ("{not json", "#version: 0.2\n", "not valid JSON"),
    ('{"a": 0, "b": 1}', "#version: 0.2\na b\n", "merges.txt:2"),
])
def test_unreadable_tokenizer_fails_before_any_work(tmp_path, write_jsonl, vocab, merges, needle):
    if vocab is not None:
        (tmp_path / "vocab.json").write_text(vocab)
        (tmp_path / "merges.txt").write_text(merges)
    else:
        (tmp_path / "vocab.json").write_text('{"a": 0}')
    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello"])
    with pytest.raises(PreprocessError) as err:
        preprocess(_cfg(tmp_path, corpus, tmp_path), log=lambda _m: None)
    assert needle in str(err.value) and "data.tokenizer." in str(err.value)
    assert not (tmp_path / "out").exists()


def test_megatron_flags_compressed_shards_and_shard_invariance(tmp_path, bpe_dir, edge_docs, write_jsonl):
    import gzip
    import lzma

    import zstandard

    docs = [d for d in edge_docs if len(d) < 5000] * 3
    plain = write_jsonl(tmp_path / "all.jsonl", docs)
    base = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(bpe_dir / "vocab.json"),
            "--merge-file", str(bpe_dir / "merges.txt"), "--append-eod", "--no-progress"]
    assert main(["--input", str(plain), "--output-prefix", str(tmp_path / "a"), "--workers", "1", *base]) == 0
    assert main(["--input", str(plain), "--output-prefix", str(tmp_path / "b"), "--workers", "2",
                 "--shard-mb", "0.0005", *base]) == 0
    shards = tmp_path / "shards"
    shards.mkdir()
    lines = plain.read_bytes().splitlines(keepends=True)
    third = len(lines) // 3
    (shards / "0.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[:third])))
    (shards / "1.jsonl.xz").write_bytes(lzma.compress(b"".join(lines[third:2 * third])))
    (shards / "2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[2 * third:])))
    assert main(["--input", str(shards), "--output-prefix", str(tmp_path / "c"), *base]) == 0
    for ext in (".bin", ".idx"):
        ref = (tmp_path / f"a_text_document{ext}").read_bytes()
        assert (tmp_path / f"b_text_document{ext}").read_bytes() == ref
        assert (tmp_path / f"c_text_document{ext}").read_bytes() == ref
    assert not list(tmp_path.glob("*.mtk-parts")), "parts are removed after success"


@pytest.mark.megatron  # after the merge, --job builds the training index cache with megatron-core
def test_job_spec_output_is_what_training_reads(tmp_path, bpe_dir, write_jsonl, capsys):
    import shutil

    from mtk.spec import load_job

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(bpe_dir / f, data_dir / f)
    write_jsonl(data_dir / "corpus.jsonl", [{"text": "hello there", "title": "t1"}, {"text": "", "title": "t2"}])
    (tmp_path / "job.yaml").write_text(json.dumps({
        "name": "pp", "model": {"preset": "tiny"},
        "data": {"dir": str(data_dir), "tokenizer": GPT2.model_dump(),
                 "corpus": {"input": "corpus.jsonl", "output_prefix": "tok/pp", "json_keys": ["text", "title"],
                            "workers": 1}}}))
    job = load_job(tmp_path / "job.yaml")
    (tmp_path / "job.json").write_text(job.to_json())
    assert main(["--job", str(tmp_path / "job.json"), "--no-progress"]) == 0
    for prefix in job.data.corpus_prefixes():
        assert Path(prefix + ".bin").is_file() and Path(prefix + ".idx").is_file()
    out = capsys.readouterr().out
    assert "2 docs" in out
    assert main(["--job", str(tmp_path / "job.json"), "--no-progress"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_fast_engine_refuses_vocab_whose_ranks_disagree(tmp_path, bpe_dir):
    from mtk.tokenizers import build_tokenizer

    vocab = json.loads((bpe_dir / "vocab.json").read_text())
    merges = (bpe_dir / "merges.txt").read_text().split("\n")
    first, second = merges[1].split(" "), merges[2].split(" ")
    a, b = "".join(first), "".join(second)
    vocab[a], vocab[b] = vocab[b], vocab[a]  # merge results no longer in merge order
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("\n".join(merges))
    tok = build_tokenizer(GPT2, str(tmp_path))
    logs: list[str] = []
    assert bpe_fast.fast_gpt2(tok, log=logs.append) is tok
    assert "do not increase" in logs[0]


def test_shadow_check_mismatch_redoes_everything_with_the_reference(tmp_path, bpe_dir, edge_docs, write_jsonl,
                                                                    monkeypatch):
    docs = [d for d in edge_docs if len(d) < 5000] * 10
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    ref = preprocess(_cfg(tmp_path / "ref", corpus, bpe_dir, engine="hf"), log=lambda _m: None)
    real, real_arrays = bpe_fast.FastGPT2._encode, bpe_fast.FastGPT2._encode_arrays

    def corrupt(self, texts):
        return [[*ids, 7] for ids in real(self, texts)]

    def corrupt_arrays(self, texts):  # what preprocess's writer calls
        return [np.append(ids, np.uint32(7)) for ids in real_arrays(self, texts)]

    monkeypatch.setattr(bpe_fast.FastGPT2, "_encode", corrupt)
    monkeypatch.setattr(bpe_fast.FastGPT2, "_encode_arrays", corrupt_arrays)
    monkeypatch.setattr(bpe_fast, "self_test", lambda *_: "")
    logs: list[str] = []
    got = preprocess(_cfg(tmp_path, corpus, bpe_dir, shard_mb=0.002), log=logs.append)
    assert any("redoing every shard" in m for m in logs)
    assert got["engine"] == "HFTokenizer"
    for ext in ("bin", "idx"):
        assert Path(got["outputs"]["text"][ext]).read_bytes() == Path(ref["outputs"]["text"][ext]).read_bytes()


def test_second_preprocess_on_the_same_prefix_is_refused(tmp_path, bpe_dir, write_jsonl):
    import fcntl

    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello"])
    (tmp_path / "out").mkdir()
    with open(tmp_path / "out" / "c.mtk-lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(PreprocessError, match="another preprocess is writing"):
            preprocess(_cfg(tmp_path, corpus, bpe_dir, engine="hf"), log=lambda _m: None)
    assert preprocess(_cfg(tmp_path, corpus, bpe_dir, engine="hf"), log=lambda _m: None)["docs"] == 1


def test_line_numbers_are_exact_in_later_shards(tmp_path, bpe_dir):
    lines = [json.dumps({"text": f"document number {i} " + "word " * (i % 50)}) for i in range(400)]
    lines[337] = '{"text": "unterminated'
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(PreprocessError, match=rf"{corpus}:338: malformed JSON"):
        preprocess(_cfg(tmp_path, corpus, bpe_dir, engine="hf", shard_mb=0.001), log=lambda _m: None)


@pytest.mark.megatron  # the index cache imports megatron-core, in a process of its own as on a node
def test_preprocess_with_the_index_cache_prints_no_upstream_noise(tmp_path, bpe_dir, write_jsonl):
    import os
    import shutil
    import subprocess
    import sys

    from mtk.spec import load_job

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(bpe_dir / f, data_dir / f)
    write_jsonl(data_dir / "corpus.jsonl", [{"text": f"hello there number {i}"} for i in range(50)])
    (tmp_path / "job.yaml").write_text(json.dumps({
        "name": "pq", "model": {"preset": "tiny", "seq_length": 8}, "train": {"iterations": 2},
        "data": {"dir": str(data_dir), "tokenizer": GPT2.model_dump(),
                 "corpus": {"input": "corpus.jsonl", "output_prefix": "tok/pq", "workers": 1}}}))
    (tmp_path / "job.json").write_text(load_job(tmp_path / "job.yaml").to_json())
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID", "MTK_DEBUG")}
    out = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "preprocess", "--job",
                          str(tmp_path / "job.json"), "--no-progress"], capture_output=True, text=True, env=env,
                         timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "index cache:" in log, log[-3000:]
    assert "Transformer Engine and Apex are not installed" not in log and "Could not determine rank" not in log, log
