"""Parquet input: row-group shards and streamed rows of the ``json_keys`` columns (pyarrow, imported here only).

Rows are read a batch at a time from the shard's row groups, so memory follows the batch, not the file. A row
is named by its 1-based number in the file, the way a JSONL line is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import sources
from .corpus import InputError, Shard

BATCH_ROWS = 1024


def _open(path: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs the 'pyarrow' package (pip install 'mtk[data]')") from None
    try:
        return pq.ParquetFile(sources.open_raw(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a damaged or non-Parquet file
        raise InputError(f"{path}: not a readable Parquet file ({exc}); re-download it or fix its suffix") from None


def row_group_ranges(path: str, shard_bytes: int) -> list[tuple[int, int]]:
    """Consecutive row groups of about ``shard_bytes`` (compressed) each, as [start, end) pairs."""
    meta = _open(path).metadata
    ranges: list[tuple[int, int]] = []
    start, acc = 0, 0
    for i in range(meta.num_row_groups):
        acc += meta.row_group(i).total_byte_size
        if acc >= shard_bytes:
            ranges.append((start, i + 1))
            start, acc = i + 1, 0
    if start < meta.num_row_groups or not ranges:
        ranges.append((start, meta.num_row_groups))
    return ranges


def row_group_bytes(path: str, start: int, end: int) -> int:
    meta = _open(path).metadata
    return sum(meta.row_group(i).total_byte_size for i in range(start, end))


def read_rows(shard: Shard, keys: list[str]) -> Iterator[tuple[int, list[str] | str, int]]:
    """Yield (row number in the file, the texts or the reason the row is unusable, bytes of text)."""
    pf = _open(shard.path)
    names = pf.schema_arrow.names
    missing = [k for k in keys if k not in names]
    if missing:
        raise InputError(f"{shard.path}: no column {', '.join(repr(k) for k in missing)} (columns: "
                         f"{', '.join(names[:12])}); set data.corpus.json_keys / --json-keys to the text columns")
    for k in keys:
        typ = str(pf.schema_arrow.field(k).type)
        if typ not in ("string", "large_string"):
            raise InputError(f"{shard.path}: column '{k}' is {typ}, expected a string column")
    row = sum(pf.metadata.row_group(i).num_rows for i in range(shard.start)) if shard.start else 0
    end = pf.metadata.num_row_groups if shard.end < 0 else shard.end
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=list(range(shard.start, end)), columns=keys):
            cols = [batch.column(k).to_pylist() for k in keys]
            for values in zip(*cols, strict=True):
                row += 1
                nulls = [k for k, v in zip(keys, values, strict=True) if v is None]
                if nulls:
                    yield row, f"column '{nulls[0]}' is null", 0
                    continue
                yield row, list(values), sum(len(v) for v in values)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{shard.path}: row group read failed after row {row} ({exc}); the file is damaged "
                         "or truncated: re-download it") from None
