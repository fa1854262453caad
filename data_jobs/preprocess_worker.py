"""The worker side of ``mtk-entrypoint preprocess``: one shard of the input in, its part files out.

Runs in pool processes (or inline with one worker): each loads the tokenizer once (:func:`init_worker`), then
tokenizes whole shards in large batches and writes each shard's ids and lengths under ``{prefix}.mtk-parts/``
(temp + rename, then a ``.done`` marker), so a killed run redoes only unmarked shards. The coordinator that plans,
dispatches and merges is :mod:`.preprocess`; the command line is :mod:`.preprocess_cli`.
"""


from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk.exitcodes import UserFacingError

from .corpus import InputError, Shard, is_parquet
from .jsonl import BadLine, line_number, parse_document, read_lines

if TYPE_CHECKING:
    from mtk.spec.data import TokenizerSpec
    from mtk.tokenizers import Tokenizer


BATCH_CHARS = 1 << 20  # tokenize in batches of about this many characters
BATCH_DOCS = 1024
MAX_EXAMPLES = 5  # bad lines kept with file:line per shard (all are counted)


class PreprocessError(UserFacingError, RuntimeError):
    """A failure the user must fix (bad input, unreadable tokenizer); the message says where and how (exit 1)."""



def atomic_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` whole or not at all, in a directory that must exist (a vanished parts dir is
    not recreated). The temp name is unique per writer: every pod of an Indexed Job runs as PID 1."""
    from mtk.files import atomic_write

    if not os.path.isdir(os.path.dirname(path) or "."):
        raise FileNotFoundError(f"{os.path.dirname(path)}: no such directory")
    atomic_write(Path(path), json.dumps(obj, indent=1, sort_keys=True))


@dataclass
class ShardResult:
    index: int
    docs: int = 0
    empty_docs: int = 0
    blank_lines: int = 0
    tokens: int = 0
    input_bytes: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[str] = field(default_factory=list)  # the first few, with file:line



_WORKER: dict[str, Any] = {}


def load_tokenizer(spec: TokenizerSpec, data_dir: str, engine: str, verified: bool,
                    log: Any = print) -> Tokenizer:
    from mtk.tokenizers import TokenizerError, build_tokenizer

    from .bpe_fast import fast_gpt2

    try:
        tok = build_tokenizer(spec, data_dir)
    except TokenizerError as exc:
        raise PreprocessError(str(exc)) from None
    if engine == "auto":
        tok = fast_gpt2(tok, log=log, verified=verified)
    return tok


def inherit_tokenizer(tok: Tokenizer) -> None:
    """The tokenizer forked workers use: the coordinator's own, already loaded and checked."""
    _WORKER["tok"] = tok


def init_worker(spec_json: str | None = None, data_dir: str = "", engine: str = "auto") -> None:
    """Start a pool worker: signals left to the coordinator; a spawned worker (no ``spec_json`` when forked
    with the tokenizer inherited) loads the tokenizer once."""
    from .stopping import ignore_in_worker

    ignore_in_worker()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if spec_json is None:
        return
    from mtk.spec.data import TokenizerSpec

    spec = TokenizerSpec.model_validate_json(spec_json)
    _WORKER["tok"] = load_tokenizer(spec, data_dir, engine, verified=True, log=lambda *_: None)


def part_files(parts_dir: str, index: int, key: str):
    from .indexed import PartFiles

    base = os.path.join(parts_dir, f"shard-{index:06d}.{key}")
    return PartFiles(f"{base}.bin", f"{base}.len", f"{base}.docs")


def done_path(parts_dir: str, index: int) -> str:
    return os.path.join(parts_dir, f"shard-{index:06d}.done")


class _KeyBuffer:
    """Ids and index data of one key for one shard, flushed to disk in batches: into a new temp file beside
    ``dest`` (never through a link planted in a shared data dir), renamed onto it by the caller."""

    def __init__(self, dest: str, dtype: str):
        import numpy as np

        from mtk.files import temp_beside

        self.np = np
        self.dtype = dtype
        fd, self.tmp = temp_beside(dest, 0o666)
        self.fh = os.fdopen(fd, "wb")  # closed in finish()
        self.lengths: list[int] = []
        self.doc_seqs: list[int] = []
        self.tokens = 0

    def add(self, batch: Sequence[Any], eod: int | None) -> None:
        """Append one batch of documents' ids (lists, or numpy arrays from an engine that returns them)."""
        np = self.np
        if batch and not isinstance(batch[0], list):
            self._add_arrays(batch, eod)
            return
        flat: list[int] = []
        for ids in batch:
            if ids:
                if eod is not None:
                    ids.append(eod)
                flat.extend(ids)
                self.lengths.append(len(ids))
                self.doc_seqs.append(1)
            else:
                self.doc_seqs.append(0)
        self.fh.write(np.asarray(flat, dtype=self.dtype).tobytes())
        self.tokens += len(flat)

    def _add_arrays(self, batch: Sequence[Any], eod: int | None) -> None:
        np = self.np
        pieces: list[Any] = []
        tail = np.asarray([] if eod is None else [eod], dtype=batch[0].dtype)
        for ids in batch:
            if len(ids):
                pieces += (ids, tail)
                self.lengths.append(len(ids) + len(tail))
                self.doc_seqs.append(1)
            else:
                self.doc_seqs.append(0)
        if pieces:
            flat = np.concatenate(pieces)
            if flat.dtype != np.dtype(self.dtype):
                flat = flat.astype(self.dtype)  # ids < vocabulary size, which the dtype was chosen to hold
            self.fh.write(flat.tobytes())
            self.tokens += len(flat)

    def finish(self) -> tuple[Any, Any]:
        self.fh.close()
        return self.np.asarray(self.lengths, dtype=self.np.int32), self.np.asarray(self.doc_seqs, dtype=self.np.int64)


def _discard(bufs: Any) -> None:
    for buf in bufs:
        buf.fh.close()
        buf.tmp.unlink(missing_ok=True)


def process_shard(shard: Shard, parts_dir: str, keys: list[str], append_eod: bool, skip_bad: bool,
                  max_line: int, tok: Tokenizer | None = None) -> ShardResult:
    """Tokenize one shard into its part files and mark it done. Raises PreprocessError on a bad line."""
    from .indexed import write_part

    tok = tok or _WORKER["tok"]
    encode = getattr(tok, "encode_batch_arrays", tok.encode_batch)
    eod = tok.eod if append_eod else None
    res = ShardResult(shard.index)
    parts = {k: part_files(parts_dir, shard.index, k) for k in keys}
    bufs: dict[str, _KeyBuffer] = {}
    try:
        for k in keys:
            bufs[k] = _KeyBuffer(parts[k].bin, tok.dtype)
    except BaseException:
        _discard(bufs.values())
        raise
    batch: list[list[str]] = []
    chars = 0

    def flush() -> None:
        nonlocal batch, chars
        if not batch:
            return
        for i, key in enumerate(keys):
            bufs[key].add(encode([texts[i] for texts in batch]), eod)
        batch, chars = [], 0

    parquet = is_parquet(shard.path)

    def bad(n: int, offset: int, reason: str) -> None:
        line = line_number(shard.path, offset) if shard.start and not parquet else n
        entry = BadLine(shard.path, line, reason, "row" if parquet else "line")
        if not skip_bad:
            raise PreprocessError(f"{entry} (shard {shard.index})\n  fix the {entry.unit}, or set "
                                  "data.corpus.on_error: skip-and-count (--skip-bad-lines) to skip and count such "
                                  f"{entry.unit}s")
        kind = reason.split(" (")[0]
        res.skipped_by_reason[kind] = res.skipped_by_reason.get(kind, 0) + 1
        if len(res.skipped_examples) < MAX_EXAMPLES:
            res.skipped_examples.append(str(entry))

    try:
        for n, offset, raw in _documents(shard, keys, max_line):
            if raw is None:
                bad(n, offset, f"document longer than {max_line / 2**20:g} MiB (raise --max-doc-mb)")
                continue
            if isinstance(raw, tuple):  # a Parquet row: (texts or reason, bytes)
                texts, size = raw
                res.input_bytes += size
            else:
                res.input_bytes += len(raw)
                if not raw.strip():
                    res.blank_lines += 1
                    continue
                texts = parse_document(raw, keys)
            if isinstance(texts, str):
                bad(n, offset, texts)
                continue
            batch.append(texts)
            res.docs += 1
            res.empty_docs += sum(not t for t in texts)
            chars += sum(map(len, texts))
            if chars >= BATCH_CHARS or len(batch) >= BATCH_DOCS:
                flush()
        flush()
    except InputError as exc:
        _discard(bufs.values())
        raise PreprocessError(f"{exc} (shard {shard.index})") from None
    except BaseException:
        _discard(bufs.values())
        raise
    for key in keys:
        lengths, doc_seqs = bufs[key].finish()
        os.replace(bufs[key].tmp, parts[key].bin)
        write_part(parts[key], lengths, doc_seqs)
        res.tokens += bufs[key].tokens
    atomic_json(done_path(parts_dir, shard.index), asdict(res))
    return res


def _documents(shard: Shard, keys: list[str], max_line: int):
    """(line/row number, offset, raw JSONL line | (texts or reason, bytes) for a Parquet row | None if too long)."""
    if is_parquet(shard.path):
        from .parquet import read_rows

        for row, texts, size in read_rows(shard, keys):
            yield row, 0, (texts, size)
        return
    yield from read_lines(shard, max_line)


def run_one(args: tuple) -> ShardResult:
    return process_shard(*args)
