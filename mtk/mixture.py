"""Data mixtures: weighted folders of preprocessed ``.bin/.idx`` prefixes -> a Megatron blend.

``expand_folders(data)`` finds every prefix under each ``data.folders`` entry (recursively, sorted) and gives
each a weight. **A folder's weight is split over its prefixes in proportion to their token counts**: the
folder then behaves like one concatenated dataset (every token in it equally likely to be drawn), so how a
source happens to be sharded into files does not change what is sampled, and a small leftover shard is not
over-sampled as it would be with an equal split. Megatron normalises the weights of the whole blend, so the
effective weight of a folder is its weight over the sum of folder weights.

Validation, before any index is built: each prefix has both files, its ``.idx`` is a Megatron index whose
token total matches the ``.bin`` size, no prefix is empty, and every prefix of every folder shares one dtype
(a blend of uint16 and int32 files means two different tokenizers). Errors name the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mtk import megatron_index
from mtk.exitcodes import BadInput

if TYPE_CHECKING:
    from mtk.spec.data import DataSpec



class MixtureError(BadInput, ValueError):
    """A folder mixture that cannot be trained on; names the folder or file and the fix (exit 2)."""


@dataclass(frozen=True)
class MixtureRow:
    """One prefix of the blend."""

    folder: str
    prefix: str
    dtype: str
    tokens: int
    documents: int
    folder_weight: float
    weight: float  # this prefix's share of the folder weight (what goes into the blend)
    effective: float  # normalised over the whole blend


def read_index_header(idx_path: str) -> tuple[str, int, int]:
    """(dtype, sequences, documents) from a Megatron ``.idx``; raises MixtureError naming the file."""
    head = megatron_index.read_header(idx_path)
    if head is None:
        raise MixtureError(f"{idx_path}: not a Megatron .idx file (bad magic); re-run preprocess for this prefix")
    if head.code not in megatron_index.DTYPES:
        raise MixtureError(f"{idx_path}: unknown dtype code {head.code}")
    return megatron_index.DTYPES[head.code], head.sequences, head.doc_entries - 1


def _tokens(idx_path: str, seqs: int) -> int:
    import numpy as np

    offset = megatron_index.HEADER_SIZE
    lengths: Any = np.memmap(idx_path, dtype=np.int32, mode="r", offset=offset, shape=(seqs,)) if seqs else []
    return int(np.sum(lengths, dtype=np.int64))


def find_prefixes(folder: str) -> list[str]:
    """Every ``X`` with ``X.bin`` or ``X.idx`` under ``folder``; a prefix missing either file is an error."""
    if not os.path.isdir(folder):
        raise MixtureError(f"data.folders: {folder} is not a directory")
    found: dict[str, set[str]] = {}
    for root, dirs, files in os.walk(folder):
        unfinished = [d for d in dirs if d.endswith(".mtk-parts")]
        if unfinished:
            raise MixtureError(f"{os.path.join(root, unfinished[0])}: an unfinished preprocess run is in this "
                               "folder; let it finish (rerun preprocess) before training on the folder")
        dirs.sort()
        for name in files:
            stem, ext = os.path.splitext(name)
            if ext in (".bin", ".idx"):
                found.setdefault(os.path.join(root, stem), set()).add(ext)
    if not found:
        raise MixtureError(f"data.folders: {folder} holds no .bin/.idx prefixes; preprocess data into it first")
    for prefix, exts in sorted(found.items()):
        for ext in (".bin", ".idx"):
            if ext not in exts:
                raise MixtureError(f"{prefix}{ext} is missing (its {exts.pop()} exists); re-run preprocess for "
                                   "this prefix or remove the stray file")
    return sorted(found)


def mixture_rows(data: DataSpec) -> list[MixtureRow]:
    """Validate every folder and compute each prefix's tokens and weights."""
    raw: list[tuple[str, str, str, int, int, float]] = []
    for item in data.folders:
        folder = data.resolve(item.path)
        for prefix in find_prefixes(folder):
            dtype, seqs, docs = read_index_header(prefix + ".idx")
            tokens = _tokens(prefix + ".idx", seqs)
            size = os.path.getsize(prefix + ".bin")
            itemsize = {"uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "float32": 4}.get(dtype, 8)
            if size != tokens * itemsize:
                raise MixtureError(f"{prefix}.bin has {size} bytes but its .idx counts {tokens} {dtype} tokens; "
                                   "the pair is from different runs or truncated: re-run preprocess")
            if tokens == 0:
                raise MixtureError(f"{prefix}: no tokens; remove it from {folder}")
            raw.append((folder, prefix, dtype, tokens, docs, item.weight))
    dtypes = {r[2] for r in raw}
    if len(dtypes) > 1:
        by = {d: next(r[1] for r in raw if r[2] == d) for d in sorted(dtypes)}
        detail = ", ".join(f"{d} (e.g. {p}.idx)" for d, p in by.items())
        raise MixtureError(f"data.folders mix token dtypes: {detail}; every prefix must come from one tokenizer")
    folder_tokens: dict[str, int] = {}
    for folder, _, _, tokens, _, _ in raw:
        folder_tokens[folder] = folder_tokens.get(folder, 0) + tokens
    weights = [fw * tokens / folder_tokens[folder] for folder, _, _, tokens, _, fw in raw]
    total = sum(weights)
    return [MixtureRow(folder, prefix, dtype, tokens, docs, fw, w, w / total)
            for (folder, prefix, dtype, tokens, docs, fw), w in zip(raw, weights, strict=True)]


def format_table(rows: list[MixtureRow]) -> str:
    """Tokens per source and effective weights, per prefix and per folder."""
    lines = [f"{'source':<48} {'tokens':>14} {'docs':>10} {'weight':>8} {'effective':>9}"]
    for folder in dict.fromkeys(r.folder for r in rows):
        mine = [r for r in rows if r.folder == folder]
        lines.append(f"{folder:<48} {sum(r.tokens for r in mine):>14,} {sum(r.documents for r in mine):>10,} "
                     f"{mine[0].folder_weight:>8.3g} {sum(r.effective for r in mine):>9.2%}")
        for r in mine:
            name = "  " + os.path.relpath(r.prefix, folder)
            lines.append(f"{name:<48} {r.tokens:>14,} {r.documents:>10,} {r.weight:>8.3g} {r.effective:>9.2%}")
    lines.append(f"{'total':<48} {sum(r.tokens for r in rows):>14,} {sum(r.documents for r in rows):>10,}")
    return "\n".join(lines)


def expand_folders(data: DataSpec, log: Callable[[str], None] | None = None) -> list[tuple[str, float]]:
    """(prefix, weight) for every prefix under ``data.folders``; prints the table through ``log`` if given."""
    rows = mixture_rows(data)
    if log is not None:
        log(format_table(rows))
    return [(r.prefix, r.weight) for r in rows]
