"""Megatron's ``.idx`` index format: one reader and writer of its header, and a cheap check of a ``.bin``/``.idx``
pair, shared by the writer (``data_jobs.indexed``), the mixture planner (``data_jobs.mixture``) and the spec's file
checks. Standard library only, so validation on a login node needs neither numpy nor megatron.

Layout (little-endian, no padding), as ``megatron.core.datasets.indexed_dataset`` writes it::

    magic "MMIDIDX\\0\\0" | u64 version=1 | u8 dtype code | u64 S sequences | u64 D = documents + 1
    int32[S] sequence lengths | int64[S] byte offsets into .bin | int64[D] document indices
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34  # magic 9 + version 8 + dtype code 1 + sequences 8 + document entries 8
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float32", 8: "uint16"}
DTYPE_CODES = {name: code for code, name in DTYPES.items()}
ITEM_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}  # dtype code -> bytes per token


class Header(NamedTuple):
    version: int
    code: int  # dtype code (see DTYPES); unchecked here
    sequences: int
    doc_entries: int  # documents + 1


def header_bytes(dtype: str, sequences: int, documents: int) -> bytes:
    """The header that starts an ``.idx`` of ``sequences`` sequences in ``documents`` documents."""
    return MAGIC + struct.pack("<QBQQ", VERSION, DTYPE_CODES[dtype], sequences, documents + 1)


def parse_header(head: bytes) -> Header | None:
    """The header fields of an ``.idx``'s first bytes; None when they are not a Megatron index (short, bad magic)."""
    if len(head) < HEADER_SIZE or head[:9] != MAGIC:
        return None
    return Header(*struct.unpack("<QBQQ", head[9:HEADER_SIZE]))


def read_header(idx_path: str) -> Header | None:
    with open(idx_path, "rb") as fh:
        return parse_header(fh.read(HEADER_SIZE))


def pair_problem(prefix: str) -> str | None:
    """What is wrong with a Megatron ``.idx``/``.bin`` pair, read from the headers and the last entry only:
    a garbage index, an index of the wrong size, or a ``.bin`` shorter than the index says."""
    idx, binf = prefix + ".idx", prefix + ".bin"
    try:
        with open(idx, "rb") as fh:
            head = parse_header(fh.read(HEADER_SIZE))
            if head is None:
                return f"{idx} is not a Megatron index file (bad header)"
            version, code, n_seq, n_doc = head
            if version != VERSION or code not in ITEM_SIZES:
                return f"{idx}: unknown index version {version} or dtype code {code}"
            expected = HEADER_SIZE + 12 * n_seq + 8 * n_doc
            actual = os.path.getsize(idx)
            if actual != expected:
                return f"{idx} is {actual} bytes but its header describes {expected} (truncated or damaged)"
            if n_seq == 0:
                return None
            fh.seek(HEADER_SIZE + 4 * (n_seq - 1))
            (last_size,) = struct.unpack("<i", fh.read(4))
            fh.seek(HEADER_SIZE + 4 * n_seq + 8 * (n_seq - 1))
            (last_ptr,) = struct.unpack("<q", fh.read(8))
    except OSError as exc:
        return f"{idx}: {exc.strerror}"
    need = last_ptr + last_size * ITEM_SIZES[code]
    have = os.path.getsize(binf)
    if last_size < 0 or last_ptr < 0 or have < need:
        return f"{binf} is {have} bytes but {idx} needs {need} (truncated, or not the index's data file)"
    return None
