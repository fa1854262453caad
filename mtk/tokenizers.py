"""Tokenizers exactly as Megatron builds them, behind one small interface.

``build_tokenizer(spec, data_dir)`` returns an object with ``vocab_size`` (added tokens included, what the
model's embedding needs), ``eod``, ``encode`` and ``encode_batch``. Every type is the reference library
itself, used the way current Megatron uses it, so ids match by construction:

- ``GPT2BPETokenizer``: Hugging Face ``tokenizers`` BPE from ``vocab.json`` + ``merges.txt`` with the
  byte-level pre-tokenizer (no prefix space) and ``<|endoftext|>`` registered as a special token, which
  is what ``AutoTokenizer.from_pretrained("gpt2", vocab_file=..., merges_file=...)`` builds. A literal
  ``<|endoftext|>`` in the text becomes the EOD id. ``legacy_eod_as_text=True`` gives the older Megatron
  behaviour (OpenAI's pure-Python encoder): the literal is split like any text and EOD is the vocab's
  own ``<|endoftext|>`` entry. Preprocessing may swap in the verified fast engine (``bpe_fast``).
- ``HuggingFaceTokenizer``: ``tokenizer.json`` through ``tokenizers``, special tokens added like
  ``tokenizer(text).input_ids``; EOD is the ``eos_token`` of a ``tokenizer_config.json`` next to it, else
  the first known end-of-text token found in the vocab.
- ``GPTSentencePieceTokenizer``: ``sentencepiece`` ``encode_as_ids`` (Llama 2); EOD is the model's EOS.

Unreadable or inconsistent files raise :class:`TokenizerError` naming the spec field and the file, before
any work starts. Heavy libraries are imported inside the builders.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk.exitcodes import BadInput

if TYPE_CHECKING:
    from mtk.spec.data import TokenizerSpec

EOD_TEXT = "<|endoftext|>"
# Megatron's preprocess switches to int32 ids at this size (indexed_dataset.DType.optimal_dtype).
UINT16_LIMIT = 65500
_HF_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>", "[SEP]")


class TokenizerError(BadInput, ValueError):
    """A tokenizer that cannot be built; the message names the spec field, the file and the fix (exit 2)."""


class Tokenizer:
    """What preprocess and training need from a tokenizer."""

    type: str = ""
    vocab_size: int
    eod: int
    files: tuple[str, ...] = ()
    options: dict[str, Any]

    @property
    def dtype(self) -> str:
        """The ``.bin`` dtype Megatron picks for this vocabulary."""
        return "uint16" if self.vocab_size < UINT16_LIMIT else "int32"

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """Identifies the exact ids this tokenizer produces (type, options, file contents)."""
        h = hashlib.sha256(json.dumps([self.type, self.options], sort_keys=True).encode())
        for path in self.files:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, eod={self.eod})"


def _resolve(path: str | None, data_dir: str, field: str, what: str) -> str:
    if not path:
        raise TokenizerError(f"data.tokenizer.{field} is required for this tokenizer type: set it to the {what}")
    full = path if os.path.isabs(path) else os.path.join(data_dir, path)
    if not os.path.isfile(full):
        raise TokenizerError(f"data.tokenizer.{field}: {full} not found; fetch it (data.fetch) or fix the path")
    if not os.access(full, os.R_OK):
        raise TokenizerError(f"data.tokenizer.{field}: {full} is not readable; check its permissions")
    return full


def _load_json(path: str, field: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"data.tokenizer.{field}: {path} is not valid JSON ({exc})") from None


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` used as Megatron uses the Hugging Face fast tokenizer."""

    def __init__(self, backend: Any, type_: str, eod: int, files: tuple[str, ...], options: dict,
                 add_special_tokens: bool = True):
        self.backend = backend
        self.type = type_
        self.eod = eod
        self.files = files
        self.options = options
        self.add_special_tokens = add_special_tokens
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encs = self.backend.encode_batch_fast(list(texts), add_special_tokens=self.add_special_tokens)
        return [e.ids for e in encs]


class SentencePieceTokenizer(Tokenizer):
    """``sentencepiece`` as Megatron's GPTSentencePieceTokenizer uses it (``encode_as_ids``, EOD = EOS)."""

    type = "GPTSentencePieceTokenizer"

    def __init__(self, processor: Any, path: str):
        self.processor = processor
        self.files = (path,)
        self.options = {}
        self.vocab_size = processor.get_piece_size()
        self.eod = processor.eos_id()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.processor.encode(list(texts), out_type=int)


def _gpt2_bpe(spec: TokenizerSpec, data_dir: str) -> HFTokenizer:
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFBackend

    vocab_path = _resolve(spec.vocab_file, data_dir, "vocab_file", "GPT-2 vocab.json")
    merges_path = _resolve(spec.merge_file, data_dir, "merge_file", "GPT-2 merges.txt")
    vocab = _load_json(vocab_path, "vocab_file")
    if not isinstance(vocab, dict) or not vocab or not all(isinstance(v, int) for v in vocab.values()):
        raise TokenizerError(f"data.tokenizer.vocab_file: {vocab_path} must map token strings to integer ids")
    _check_merges(merges_path, vocab)
    try:
        backend = HFBackend(models.BPE.from_file(vocab_path, merges_path))
    except Exception as exc:  # the Rust error text says which line is bad
        raise TokenizerError(f"data.tokenizer.merge_file: cannot build BPE from {vocab_path} + {merges_path}: "
                             f"{exc}") from None
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    if spec.legacy_eod_as_text:
        if EOD_TEXT not in vocab:
            raise TokenizerError(f"data.tokenizer.legacy_eod_as_text: {vocab_path} has no {EOD_TEXT} entry, "
                                 "which the legacy encoder uses as EOD; unset legacy_eod_as_text")
        eod = vocab[EOD_TEXT]
    else:
        backend.add_special_tokens([AddedToken(EOD_TEXT, special=True)])
        eod = backend.token_to_id(EOD_TEXT)
    options = {"legacy_eod_as_text": spec.legacy_eod_as_text}
    return HFTokenizer(backend, "GPT2BPETokenizer", eod, (vocab_path, merges_path), options)


def _check_merges(path: str, vocab: dict[str, int]) -> None:
    """Every merge line has two parts whose concatenation is in the vocab (else ids silently differ)."""
    with open(path, encoding="utf-8", errors="strict") as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                line = line.rstrip("\n")
                if (lineno == 1 and line.startswith("#version")) or not line:
                    continue
                parts = line.split(" ")
                if len(parts) != 2 or parts[0] + parts[1] not in vocab:
                    raise TokenizerError(
                        f"data.tokenizer.merge_file: {path}:{lineno}: expected 'A B' with AB in vocab.json, "
                        f"got {line[:60]!r}; are vocab_file and merge_file from the same tokenizer?")
        except UnicodeDecodeError as exc:
            raise TokenizerError(f"data.tokenizer.merge_file: {path} is not UTF-8 text ({exc})") from None


def _hf_json(spec: TokenizerSpec, data_dir: str) -> HFTokenizer:
    from tokenizers import Tokenizer as HFBackend

    path = _resolve(spec.model, data_dir, "model", "tokenizer.json")
    _load_json(path, "model")
    try:
        backend = HFBackend.from_file(path)
    except Exception as exc:
        raise TokenizerError(f"data.tokenizer.model: {path} is not a Hugging Face tokenizer.json: {exc}") from None
    eod = _hf_eod(backend, Path(path).with_name("tokenizer_config.json"))
    files = (path,)
    return HFTokenizer(backend, "HuggingFaceTokenizer", eod, files, {})


def _hf_eod(backend: Any, config: Path) -> int:
    names: list[str] = []
    if config.is_file():
        eos = _load_json(str(config), "model").get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            names.append(eos)
    names += _HF_EOS_CANDIDATES
    for name in names:
        token_id = backend.token_to_id(name)
        if token_id is not None:
            return token_id
    raise TokenizerError(f"data.tokenizer.model: no end-of-text token found (looked for {', '.join(names)}); "
                         f"put a tokenizer_config.json with eos_token next to the tokenizer.json")


def _sentencepiece(spec: TokenizerSpec, data_dir: str) -> SentencePieceTokenizer:
    import sentencepiece

    path = _resolve(spec.model, data_dir, "model", "SentencePiece tokenizer.model")
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.Load(path)
    except (OSError, RuntimeError) as exc:
        raise TokenizerError(f"data.tokenizer.model: {path} is not a SentencePiece model: {exc}") from None
    if processor.eos_id() < 0:
        raise TokenizerError(f"data.tokenizer.model: {path} has no EOS piece, which Megatron uses as EOD")
    return SentencePieceTokenizer(processor, path)


_BUILDERS = {
    "GPT2BPETokenizer": _gpt2_bpe,
    "HuggingFaceTokenizer": _hf_json,
    "GPTSentencePieceTokenizer": _sentencepiece,
}


def build_tokenizer(spec: TokenizerSpec, data_dir: str) -> Tokenizer:
    """Build the tokenizer ``spec`` names; relative file paths are resolved against ``data_dir``."""
    builder = _BUILDERS.get(spec.type)
    if builder is None:
        raise TokenizerError(f"data.tokenizer.type: {spec.type} cannot tokenize text; use one of "
                             f"{', '.join(_BUILDERS)}")
    return builder(spec, data_dir)
