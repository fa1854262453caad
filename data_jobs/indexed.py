"""Megatron's ``.bin``/``.idx`` format, written by streaming so memory does not grow with the corpus.

The bytes equal what ``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder`` writes for the same
ids; the ``.idx`` layout and its header are :mod:`mtk.megatron_index`'s.

The ``.idx`` is assembled from per-shard parts in three streamed passes (lengths, offsets, document
indices), one shard's arrays in memory at a time.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtk import megatron_index
from mtk.files import replacing, temp_beside


@dataclass(frozen=True)
class PartFiles:
    """One shard's output for one key: ids, sequence lengths (int32), per-document sequence counts (int64)."""

    bin: str
    lengths: str
    doc_seqs: str


def write_part(part: PartFiles, lengths: np.ndarray, doc_seqs: np.ndarray) -> None:
    """Write a shard's index arrays (each via temp + rename); its ``.bin`` is streamed by the caller."""
    for path, arr in ((part.lengths, lengths.astype(np.int32)),
                      (part.doc_seqs, doc_seqs.astype(np.int64))):
        with replacing(path, 0o666) as fh:  # a new temp file: never through a link planted in a shared data dir
            fh.write(arr.tobytes(order="C"))


def merge_parts(parts: Sequence[PartFiles], dtype: str, bin_path: str, idx_path: str) -> tuple[int, int]:
    """Concatenate shard parts into the final ``.bin``/``.idx`` (temp files, renamed at the end).

    Returns (sequences, documents). The ``.idx`` is renamed last, so a complete ``.idx`` implies its ``.bin``. The
    temp files are new, under names nobody can take first (:func:`mtk.files.temp_beside`): a data dir may be shared.
    """
    itemsize = np.dtype(dtype).itemsize
    temps: list[Path] = []
    try:
        bin_fd, bin_tmp = temp_beside(bin_path, 0o666)
        temps.append(bin_tmp)
        with os.fdopen(bin_fd, "wb") as out:
            for part in parts:
                with open(part.bin, "rb") as src:
                    shutil.copyfileobj(src, out, 8 << 20)
        n_seq = sum(os.path.getsize(p.lengths) // 4 for p in parts)
        n_doc = sum(os.path.getsize(p.doc_seqs) // 8 for p in parts)
        idx_fd, idx_tmp = temp_beside(idx_path, 0o666)
        temps.append(idx_tmp)
        with os.fdopen(idx_fd, "wb") as out:
            out.write(megatron_index.header_bytes(dtype, n_seq, n_doc))
            for part in parts:
                out.write(np.fromfile(part.lengths, dtype=np.int32).tobytes())
            offset = 0
            for part in parts:
                lengths = np.fromfile(part.lengths, dtype=np.int32).astype(np.int64)
                pointers = np.empty_like(lengths)
                if lengths.size:
                    pointers[0] = 0
                    np.cumsum(lengths[:-1] * itemsize, out=pointers[1:])
                    pointers += offset
                    offset += int(lengths.sum()) * itemsize
                out.write(pointers.tobytes())
            out.write(np.zeros(1, dtype=np.int64).tobytes())
            seen = 0
            for part in parts:
                counts = np.fromfile(part.doc_seqs, dtype=np.int64)
                out.write((np.cumsum(counts) + seen).tobytes())
                seen += int(counts.sum())
        if offset != os.path.getsize(bin_tmp):
            raise RuntimeError(f"internal error: {bin_tmp} has {os.path.getsize(bin_tmp)} bytes, lengths say "
                               f"{offset}")
        from .stopping import deferred

        with deferred():  # a stop signal never lands between the pair: never a new .bin beside an old .idx
            os.replace(bin_tmp, bin_path)
            os.replace(idx_tmp, idx_path)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    return n_seq, n_doc
