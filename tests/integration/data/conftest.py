"""Fixtures for the data-job integration tests: a small BPE trained here and a multi-MB corpus."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def stdlib_docs() -> list[str]:
    """Real text: CPython standard library sources, one document per file."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("*.py"))]


@pytest.fixture(scope="session")
def small_bpe(tmp_path_factory, stdlib_docs) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("bpe")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(stdlib_docs[:30], trainers.BpeTrainer(
        vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.model.save(str(out))
    return out


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, stdlib_docs) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "stdlib.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for text in stdlib_docs:
            fh.write(json.dumps({"text": text}) + "\n")
    return path
