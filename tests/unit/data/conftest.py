"""Data-job fixtures: tokenizer files trained here (no download), an edge-case corpus, Megatron's writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EDGE_DOCS = [
    "Hello world! This is a plain sentence.",
    "emoji 😀👍🏽 🇫🇷 family 👨‍👩‍👧 math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚 astral 𠀀𪚥",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 \u1100\u1161\u11a8",
    "CJK 中文字符和标点。日本語のテキスト、カタカナ。한국어 문장입니다.",
    "RTL: עברית עם ניקוד שָׁלוֹם and العربية مع أرقام ١٢٣",
    "line\r\nendings\rold mac\nunix\r\n\r\n",
    "nul\x00and control\x01\x02\x1b[0m\x7f chars \x0b\x0c",
    "   leading and trailing whitespace runs   \t\t  \n\n\n    ",
    "digits 1234567890 3.14159 -42 1e-9 0x1F 1,000,000 ²³",
    "contractions: don't I'll we've they're she'd it's DON'T Y'ALL 'S",
    "a literal <|endoftext|> in the middle<|endoftext|>and <|endoftext at the end",
    "",
    "code: def f(x):\n    return {'a': [1, 2]}  # comment\n",
    "",
    "x" * 300 + " " + "ab" * 200,
    "\u00a0nbsp\u2003emsp\u3000ideographic\u200bzwsp\ufeffbom\u2028ls\u2029ps",
]


def _training_text() -> list[str]:
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("[a-e]*.py"))[:40]]
    return texts + EDGE_DOCS * 20


@pytest.fixture(scope="session")
def edge_docs() -> list[str]:
    """The edge cases plus a document over 1 MB (mixed scripts so BPE has work to do)."""
    big = ("The quick brown fox, 1234 times; 中文 😀 don't\r\n" * 30000)[: (1 << 20) + 4321]
    return [*EDGE_DOCS, big, ""]


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory) -> Path:
    """vocab.json + merges.txt of a small byte-level BPE trained here with HF tokenizers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("bpe")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    tok.model.save(str(out))
    return out


@pytest.fixture(scope="session")
def bpe_dir_legacy(bpe_dir, tmp_path_factory) -> Path:
    """The same BPE with <|endoftext|> as a vocab.json entry (what the legacy encoder needs)."""
    out = tmp_path_factory.mktemp("bpe-legacy")
    vocab = json.loads((bpe_dir / "vocab.json").read_text())
    vocab["<|endoftext|>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab))
    (out / "merges.txt").write_text((bpe_dir / "merges.txt").read_text())
    return out


@pytest.fixture(scope="session")
def megatron_indexed():
    """megatron.core.datasets.indexed_dataset (with the CPU compat stubs when triton is absent)."""
    from mtk.training.compat import install_import_stubs

    install_import_stubs()
    from megatron.core.datasets import indexed_dataset

    return indexed_dataset


@pytest.fixture(scope="session")
def megatron_write(megatron_indexed):
    """Write ids per document the way Megatron's preprocess_data.py does; returns (bin bytes, idx bytes)."""
    import numpy as np

    def write(docs_ids: list[list[int]], dtype, prefix: str) -> tuple[bytes, bytes]:
        builder = megatron_indexed.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for ids in docs_ids:
            builder.add_document(np.array(ids, dtype=np.int64), [len(ids)] if ids else [])
        builder.finalize(prefix + ".idx")
        return Path(prefix + ".bin").read_bytes(), Path(prefix + ".idx").read_bytes()

    return write


@pytest.fixture(scope="session")
def write_jsonl():
    """write_jsonl(path, docs): one {"text": doc} per line (dicts written as given)."""

    def write(path: Path, docs: list, key: str = "text") -> Path:
        with open(path, "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps({key: d} if isinstance(d, str) else d) + "\n")
        return path

    return write
