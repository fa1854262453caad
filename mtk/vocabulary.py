"""The vocabulary the model is built with: one rule for the engine and for ``mtk validate``.

The embedding and output layers have the tokenizer's vocabulary (added tokens included), padded to a multiple of
``model.make_vocab_size_divisible_by × parallel.tp`` as Megatron-LM pads it. ``model.vocab_size`` is that
vocabulary only where no tokenizer is named (``NullTokenizer``: mock or pre-tokenized data); with a tokenizer the
spec's number is not read, and checkpoints and exports record the tokenizer's.

:func:`built` decides it. The engine passes the size of the tokenizer it built; ``mtk validate``, the memory gate and
the megatron-core check let it count the tokenizer's own files here, with the standard library only (a login node
has neither ``tokenizers`` nor ``sentencepiece``), counting as those libraries count; where the files are not here
yet, a file ``data.fetch`` pins by a digest this module knows gives its size. Otherwise the size is unknown here,
``model.vocab_size`` stands in, and :meth:`Vocabulary.note` says so.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtk.spec.data import TokenizerSpec
    from mtk.spec.job import Job

EOD_TEXT = "<|endoftext|>"
# Tokenizer files whose size is known by their SHA-256 (what data.fetch pins), so validate can plan a job whose
# files are only on the cluster. GPT-2's encoder.json: the digest tiktoken's gpt2 encoding pins, 50,257 entries
# (its explicit_n_vocab, <|endoftext|> the last of them).
KNOWN_FILES: dict[str, tuple[int, str]] = {
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783": (50257, "GPT-2's BPE"),
}


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """``vocab`` rounded up to a multiple of ``divisible_by × tp`` (Megatron-LM's ``_vocab_size_with_padding``)."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


@dataclass(frozen=True)
class Vocabulary:
    """``size``: tokens (what checkpoints record as ``vocab_size``); ``padded``: rows of the embedding and output
    layers; ``source``: where ``size`` came from, in words; ``known``: False when a tokenizer is named but its size
    could not be found here (``size`` is then ``model.vocab_size``, standing in)."""

    size: int
    padded: int
    source: str
    known: bool = True

    def note(self, job: Job) -> str:
        """One line when the spec's ``model.vocab_size`` is not what the model is built with, or the tokenizer's
        size is unknown here; '' otherwise."""
        m = job.model
        if job.data.tokenizer.type == "NullTokenizer":
            return ""
        if not self.known:
            return (f"note: vocabulary: {self.source}; the figures use model.vocab_size ({m.vocab_size:,}) in its "
                    "place, the model will have the tokenizer's (--set data.dir=<a local copy> to plan with it)")
        if m.vocab_size != self.size:
            return (f"note: vocabulary: model.vocab_size ({m.vocab_size:,}) is not read with a tokenizer: the model "
                    f"is built with data.tokenizer's {self.size:,} tokens (padded to {self.padded:,}), which "
                    "checkpoints and exports record")
        return ""


def built(job: Job, tokenizer_size: int | None = None) -> Vocabulary:
    """The vocabulary of the model the engine builds for ``job``.

    ``tokenizer_size``: the size of the tokenizer the engine built (``model.vocab_size`` for ``NullTokenizer``); None:
    found as the engine will find it (``model.vocab_size`` without a tokenizer, else the tokenizer's files)."""
    m = job.model
    known = True
    if tokenizer_size is not None:
        size, source = tokenizer_size, "the tokenizer"
    elif job.data.tokenizer.type == "NullTokenizer":
        size, source = m.vocab_size, "model.vocab_size (no tokenizer: mock or pre-tokenized data)"
    else:
        counted, source = tokenizer_size_here(job)
        known = counted is not None
        size = counted if counted is not None else m.vocab_size
    return Vocabulary(size, padded_vocab(size, m.make_vocab_size_divisible_by, job.parallel.tp), source, known)


def tokenizer_size_here(job: Job) -> tuple[int | None, str]:
    """(the tokenizer's size, where it came from) from its files on this machine or a known pinned file; (None, why)
    when neither gives it."""
    spec, data_dir = job.data.tokenizer, job.data.dir
    path = _main_file(spec)
    if path is None:
        return None, f"data.tokenizer names no file for {spec.type}"
    full = path if os.path.isabs(path) else os.path.join(data_dir, path)
    try:
        st = os.stat(full)
    except OSError:
        pinned = _pinned_size(job, path)
        if pinned is not None:
            return pinned
        return None, f"the tokenizer's size is unknown here ({full} is not on this machine)"
    try:
        size = _count(spec.type, full, spec.legacy_eod_as_text, st.st_size, st.st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return None, f"the tokenizer's size is unknown here ({full} could not be read: {exc})"
    return size, f"data.tokenizer: {full}"


def _main_file(spec: TokenizerSpec) -> str | None:
    """The file that holds the vocabulary."""
    return spec.vocab_file if spec.type == "GPT2BPETokenizer" else spec.model


def _pinned_size(job: Job, path: str) -> tuple[int, str] | None:
    """The size of a file ``data.fetch`` will download to ``path`` with a SHA-256 this module knows."""
    want = os.path.normpath(path)
    for item in job.data.fetch:
        name = item.path or os.path.basename(urllib.parse.urlparse(item.url).path)
        if os.path.normpath(name) == want and item.sha256 in KNOWN_FILES:
            size, what = KNOWN_FILES[item.sha256]
            return size, f"data.fetch's {path} ({what}, known by its sha256)"
    return None


@functools.lru_cache(maxsize=16)
def _count(kind: str, path: str, legacy_eod_as_text: bool, _size: int, _mtime_ns: int) -> int:
    """The tokenizer's size as ``mtk.tokenizers.build_tokenizer`` gives it (keyed on the file's size and mtime,
    so a validate that asks several times reads the file once)."""
    if kind == "GPTSentencePieceTokenizer":
        with open(path, "rb") as fh:
            return _sentencepiece_pieces(fh.read())
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if kind == "GPT2BPETokenizer":
        if not isinstance(data, dict) or not data:
            raise ValueError("not a JSON object of token -> id")
        # tokenizers counts distinct token strings; <|endoftext|> is added as a special token unless legacy.
        return len(data) + (0 if legacy_eod_as_text or EOD_TEXT in data else 1)
    return _tokenizer_json_size(data)


def _tokenizer_json_size(data: Any) -> int:
    """Distinct token strings of a ``tokenizer.json``'s model vocabulary and its added tokens (what
    ``Tokenizer.get_vocab_size(with_added_tokens=True)`` counts)."""
    vocab = data["model"]["vocab"]
    names = set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab}  # Unigram: [piece, score]
    names |= {t["content"] for t in data.get("added_tokens") or []}
    return len(names)


def _sentencepiece_pieces(blob: bytes) -> int:
    """The pieces of a SentencePiece ``ModelProto`` (field 1, repeated): ``SentencePieceProcessor.get_piece_size``."""
    count, pos = 0, 0
    while pos < len(blob):
        key, pos = _varint(blob, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(blob, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(blob, pos)
            pos += length
            count += field == 1
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"not a SentencePiece model (protobuf wire type {wire} at byte {pos})")
    if pos != len(blob):
        raise ValueError("not a SentencePiece model (truncated)")
    return count


def _varint(blob: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = blob[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
