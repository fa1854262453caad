"""One list of documents written as a multi-format corpus (plain JSONL, .jsonl.zst, Parquet) and as one JSONL
file, so a sharded preprocess of the former can be compared byte for byte with a single-process run of the latter.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_reference(path: Path, docs: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": d}) + "\n")
    return path


def write_multiformat(folder: Path, docs: list[str], row_group_rows: int = 16) -> list[Path]:
    """docs split in three, in name order: a.jsonl, b.jsonl.zst, c.parquet (several row groups)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    folder.mkdir(parents=True, exist_ok=True)
    n = len(docs)
    a, b, c = docs[: n // 3], docs[n // 3: 2 * n // 3], docs[2 * n // 3:]
    plain = write_reference(folder / "a.jsonl", a)
    lines = "".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(b)).encode()
    zst = folder / "b.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(lines))
    parquet = folder / "c.parquet"
    pq.write_table(pa.table({"id": list(range(len(c))), "text": c}), parquet, row_group_size=row_group_rows)
    return [plain, zst, parquet]
