"""The run's tokenizer travels with its checkpoints, into Hugging Face exports and back out of HF imports.

A checkpoint records the tokenizer the model was trained with under ``mtk.tokenizer`` in its common state:
its type, vocabulary size (added tokens included), EOD/BOS ids, options and the *contents* of its files. The
files are embedded rather than referenced because a checkpoint is what gets copied to another machine:
``data.dir`` may be a cluster path that the machine running ``mtk convert`` cannot see, several runs share one
checkpoint dir, and a file replaced in ``data.dir`` after training would silently give other ids. A
tokenizer is at most a few MB (Llama 3's tokenizer.json: 9 MB) beside weights of GBs.

Export writes files ``transformers.AutoTokenizer`` loads with no other input (``tokenizer.json`` +
``tokenizer_config.json``; ``tokenizer.model`` for SentencePiece) and takes ``eos_token_id``/``bos_token_id``
from the tokenizer — never a model family's default (GPT-2's 50256 in a 12,000-token vocabulary).
Mock/pre-tokenized runs (``NullTokenizer``) have no tokenizer: the export then says so and sets the ids to null.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk.exitcodes import BadInput
from mtk.files import replacing

if TYPE_CHECKING:
    from mtk.spec.data import TokenizerSpec

KEY = "tokenizer"  # under the checkpoint's ``mtk`` key
EOD_TEXT = "<|endoftext|>"
# The file names a record stores, per tokenizer type (the names HF directories use).
FILES = {"GPT2BPETokenizer": ("vocab.json", "merges.txt"),
         "HuggingFaceTokenizer": ("tokenizer.json", "tokenizer_config.json"),
         "GPTSentencePieceTokenizer": ("tokenizer.model",)}


class TokenizerExportError(BadInput, ValueError):
    """A recorded tokenizer that would give the export wrong ids; the message names the field and the fix."""


@dataclass(frozen=True)
class SpecialIds:
    eos: int | None
    bos: int | None


def record(tokenizer: Any) -> dict[str, Any]:
    """What a checkpoint stores about ``tokenizer`` (a :class:`mtk.tokenizers.Tokenizer`)."""
    files: dict[str, bytes] = {}
    names = FILES[tokenizer.type]
    for name, path in zip(names, tokenizer.files, strict=False):
        files[name] = Path(path).read_bytes()
    if tokenizer.type == "HuggingFaceTokenizer":
        config = Path(tokenizer.files[0]).with_name("tokenizer_config.json")
        if config.is_file():
            files["tokenizer_config.json"] = config.read_bytes()
    return {"type": tokenizer.type, "vocab_size": int(tokenizer.vocab_size), "eod": int(tokenizer.eod),
            "bos": _bos(tokenizer), "options": dict(tokenizer.options), "files": files,
            "fingerprint": tokenizer.fingerprint()}


def _bos(tokenizer: Any) -> int | None:
    if tokenizer.type == "GPT2BPETokenizer":
        return int(tokenizer.eod)  # GPT-2 begins and ends a text with <|endoftext|>
    if tokenizer.type == "GPTSentencePieceTokenizer":
        bos = tokenizer.processor.bos_id()
        return int(bos) if bos >= 0 else None
    config = Path(tokenizer.files[0]).with_name("tokenizer_config.json")
    name = _token_name(json.loads(config.read_text()).get("bos_token")) if config.is_file() else None
    found = tokenizer.backend.token_to_id(name) if name else None
    return int(found) if found is not None else None


def _token_name(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def of_checkpoint(common: dict[str, Any]) -> dict[str, Any] | None:
    """The tokenizer record of a checkpoint's common state (None: mock data, or written before mtk recorded it)."""
    from ..checkpoint_layout import MTK_KEY

    return (common.get(MTK_KEY) or {}).get(KEY)


def rebuild(rec: dict[str, Any], directory: Path) -> Any:
    """Write the record's files into ``directory`` and build the tokenizer from them (ids as in training)."""
    from mtk.tokenizers import build_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    for name, blob in rec["files"].items():
        _write(directory / name, blob)
    return build_tokenizer(_spec(rec["type"], bool(rec.get("options", {}).get("legacy_eod_as_text"))), str(directory))


def _spec(kind: str, legacy_eod_as_text: bool = False) -> TokenizerSpec:
    """The data.tokenizer section that builds a ``kind`` tokenizer from the HF file names in one folder."""
    from mtk.spec.data import TokenizerSpec

    if kind == "GPT2BPETokenizer":
        return TokenizerSpec.model_validate({"type": kind, "vocab_file": "vocab.json", "merge_file": "merges.txt",
                                             "legacy_eod_as_text": legacy_eod_as_text})
    return TokenizerSpec.model_validate({"type": kind, "model": FILES[kind][0]})


def write_hf(rec: dict[str, Any] | None, out: Path, vocab_size: int, max_length: int) -> SpecialIds:
    """Write the tokenizer files of ``rec`` into the HF directory ``out``; return the ids config.json carries.

    ``vocab_size`` is the exported model's; an id outside it would be a wrong id, so it is refused."""
    if rec is None:
        return SpecialIds(None, None)
    tok = rebuild(rec, out)
    if tok.vocab_size != rec["vocab_size"]:
        raise TokenizerExportError(f"data.tokenizer: the recorded files give {tok.vocab_size} tokens, the checkpoint "
                                   f"recorded {rec['vocab_size']}; the record is inconsistent, export without it")
    ids = SpecialIds(eos=int(tok.eod), bos=rec.get("bos"))
    for what, value in (("EOS/EOD", ids.eos), ("BOS", ids.bos)):
        if value is not None and not 0 <= value < vocab_size:
            raise TokenizerExportError(
                f"data.tokenizer: the tokenizer's {what} id {value} is outside the model's vocabulary of "
                f"{vocab_size} (model.vocab_size); train with model.vocab_size covering the tokenizer")
    kind = rec["type"]
    config: dict[str, Any] = {}
    if kind == "GPT2BPETokenizer":
        tok.backend.save(str(out / "tokenizer.json"))
        config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": EOD_TEXT, "eos_token": EOD_TEXT,
                  "unk_token": EOD_TEXT, "add_prefix_space": False, "add_bos_token": False}
    elif kind == "HuggingFaceTokenizer":
        if "tokenizer_config.json" in rec["files"]:
            config = json.loads(rec["files"]["tokenizer_config.json"])
        config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        config["eos_token"] = tok.backend.id_to_token(ids.eos)
        if ids.bos is not None:
            config["bos_token"] = tok.backend.id_to_token(ids.bos)
    else:  # SentencePiece: what Megatron's GPTSentencePieceTokenizer does (encode_as_ids: no BOS, no EOS added)
        sp = tok.processor
        config = {"tokenizer_class": "LlamaTokenizer", "eos_token": sp.id_to_piece(ids.eos),
                  "add_bos_token": False, "add_eos_token": False, "legacy": True}
        if ids.bos is not None:
            config["bos_token"] = sp.id_to_piece(ids.bos)
        if sp.unk_id() >= 0:
            config["unk_token"] = sp.id_to_piece(sp.unk_id())
    config["model_max_length"] = max_length
    _write(out / "tokenizer_config.json", json.dumps(config, indent=1).encode())
    return ids


def config_ids(ids: SpecialIds) -> dict[str, int | None]:
    """The config.json/generation_config.json fields; null (not the family default) where unknown."""
    return {"bos_token_id": ids.bos, "eos_token_id": ids.eos}


def generation_config(ids: SpecialIds) -> dict[str, Any]:
    return {**config_ids(ids), "pad_token_id": ids.eos, "do_sample": False}


def from_hf_dir(hf_dir: Path) -> dict[str, Any] | None:
    """The tokenizer record of an HF directory (tokenizer.json, else tokenizer.model, else vocab.json +
    merges.txt), or None when it has no tokenizer files."""
    hf_dir = Path(hf_dir)
    if (hf_dir / "tokenizer.json").is_file():
        kind = "HuggingFaceTokenizer"
    elif (hf_dir / "tokenizer.model").is_file():
        kind = "GPTSentencePieceTokenizer"
    elif (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        kind = "GPT2BPETokenizer"
    else:
        return None
    from mtk.tokenizers import build_tokenizer

    return record(build_tokenizer(_spec(kind), str(hf_dir)))


def describe(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "no tokenizer"
    return f"{rec['type']} ({rec['vocab_size']} tokens, EOD {rec['eod']})"


def _write(path: Path, blob: bytes) -> None:
    """Temp-then-rename, so a reader never sees half a file (a new temp file, never through a link); 0644 whatever
    the umask, as the model files beside it (a model directory is for sharing)."""
    with replacing(path) as fh:
        fh.write(blob)
        os.fchmod(fh.fileno(), 0o644)


def inherited(source: str | Path) -> dict[str, Any] | None:
    """The tokenizer record of a checkpoint (dir or root) or an HF directory that a run takes its weights from."""
    source = Path(source)
    if (source / "config.json").is_file():
        return from_hf_dir(source)
    from megatron.core import dist_checkpointing

    from ..checkpoint_layout import resolve_checkpoint_dir

    path, _iteration, _release = resolve_checkpoint_dir(source)
    return of_checkpoint(dist_checkpointing.load_common_state_dict(str(path)))
