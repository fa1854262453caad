"""``mtk-entrypoint preprocess``: JSONL/Parquet -> Megatron ``{prefix}_{key}_document.bin/.idx``, exact, fast,
resumable, and shardable across nodes.

    mtk-entrypoint preprocess --job RUN/job.json            # data.corpus + data.tokenizer from the spec
    mtk-entrypoint preprocess --job RUN/job.json --task-index 2 --tasks 4   # one task of a sharded job
    mtk-entrypoint preprocess --input X.jsonl --output-prefix out/x --tokenizer-type GPT2BPETokenizer \\
        --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 8   # Megatron's own flags

How it works: the input is cut into shards (byte ranges of plain files; one per compressed file). Worker
processes tokenize whole shards in large batches (no per-line IPC) and write each shard's ids and lengths
under ``{prefix}.mtk-parts/`` (temp + rename, then a ``.done`` marker). A manifest pins the plan and the
tokenizer; a rerun after a kill or a time limit redoes only shards without a marker. Finally the parts are
streamed into the final files (temp names, renamed at the end) and a ``{prefix}.mtk-preprocess.json``
record is written; with it in place a rerun does nothing. Output bytes do not depend on worker count,
shard size, engine, interruptions or the number of tasks.

Modules: this one plans, dispatches to workers and merges; :mod:`.preprocess_worker` tokenizes a shard;
:mod:`.preprocess_cli` is the command line (Megatron's flags or ``--job``).

Sharded (``data.corpus.shards: N``): every task computes the same plan and processes only its contiguous slice
of it (:mod:`.sharding`; index from ``--task-index``, ``SLURM_ARRAY_TASK_ID`` or ``JOB_COMPLETION_INDEX``),
writing the same part files and markers. The task that finds every shard done merges (under a lock, so
exactly one does), which is the single-process merge: byte-identical output; it removes the parts only while
holding every task's lock, so a late task still inside them is never deleted under. ``--merge`` runs only the
merge.

Documents follow Megatron's ``tools/preprocess_data.py``: one sequence per non-empty document, EOD appended
with ``--append-eod``; an empty document adds no sequence but still ends a document. Bad lines (malformed
JSON, invalid UTF-8, lone surrogates, missing keys, documents over ``--max-doc-mb``) stop the run with
file:line, or with ``--skip-bad-lines`` are skipped and counted. Blank lines are not documents (counted).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import sources
from .corpus import InputError, Shard, input_files
from .part_locks import exclusive, forget_task_lock, register_run, remove_parts, task_lock
from .preprocess_worker import (
    MAX_EXAMPLES,
    PreprocessError,
    ShardResult,
    atomic_json,
    done_path,
    inherit_tokenizer,
    init_worker,
    load_tokenizer,
    part_files,
    process_shard,
    run_one,
)
from .sharding import plan_shards

if TYPE_CHECKING:
    from collections.abc import Callable

    from mtk.spec.data import TokenizerSpec
    from mtk.tokenizers import Tokenizer


MANIFEST_VERSION = 1


ON_ERROR = ("fail", "skip-and-count")


@dataclass
class PreprocessConfig:
    """Everything that decides the output, plus how to get there (workers, shard size, engine)."""

    input: str
    output_prefix: str
    tokenizer: TokenizerSpec
    data_dir: str = "."
    json_keys: list[str] = field(default_factory=lambda: ["text"])
    append_eod: bool = True
    workers: int | None = None
    skip_bad_lines: bool = False
    engine: str = "auto"  # auto: the verified fast BPE engine where it applies; hf: reference libraries only
    shard_mb: float | None = None  # None: total input / 64, within [1, 64] MiB (fixed by the inputs alone)
    max_doc_mb: float = 16.0
    progress: bool | None = None  # None: a live line on a TTY, periodic lines otherwise
    tasks: int = 1  # tasks of a sharded job (data.corpus.shards); 1: one process does everything
    task_index: int | None = None  # None: do every task's shards here; else only this task's, then maybe merge
    merge_only: bool = False  # only merge the parts the tasks wrote (fails naming the shards still missing)
    allow_empty: bool = False  # an input with no documents is an error unless this is set
    job: str | None = None  # job.json this run came from: the merge then builds the training index cache
    run_dir: str | None = None  # the run this task belongs to: the merge, whoever's, tells it the data is ready

    def check(self) -> None:
        """Refuse settings that cannot be honoured, before any work."""
        if self.workers is not None and self.workers < 1:
            raise PreprocessError(f"workers must be at least 1 (got {self.workers}); leave it unset for one "
                                  "per CPU this task may use")
        if self.tasks < 1:
            raise PreprocessError(f"tasks must be at least 1 (got {self.tasks})")
        if self.task_index is not None and not 0 <= self.task_index < self.tasks:
            raise PreprocessError(f"task index {self.task_index} is outside 0..{self.tasks - 1} "
                                  f"(data.corpus.shards is {self.tasks})")

    def output_paths(self, key: str) -> tuple[str, str]:
        base = f"{self.output_prefix}_{key}_document"
        return f"{base}.bin", f"{base}.idx"



def _plan(cfg: PreprocessConfig, tok: Tokenizer) -> dict:
    files = input_files(cfg.input)
    total = sum(sources.size(p) for p in files)
    if total == 0 and not cfg.allow_empty:
        raise PreprocessError(f"{cfg.input}: the corpus is empty (0 bytes); check the getdata step, or set "
                              "data.corpus.allow_empty (--allow-empty) if an empty output is intended")
    # At least four shards per task, so a sharded job's slices stay balanced.
    per = max(64, 4 * cfg.tasks)
    shard_bytes = cfg.shard_mb * 2**20 if cfg.shard_mb else min(max(total / per, 1 << 20), 64 << 20)
    shards = plan_shards(files, max(1, int(shard_bytes)))
    return {
        "version": MANIFEST_VERSION,
        "inputs": [{"path": p if sources.is_s3(p) else os.path.abspath(p), "size": sources.size(p),
                    "mtime": sources.mtime(p)} for p in files],
        "shards": [s.to_dict() for s in shards],
        "keys": cfg.json_keys,
        "append_eod": cfg.append_eod,
        "tokenizer": {"type": tok.type, "fingerprint": tok.fingerprint(), "vocab_size": tok.vocab_size,
                      "eod": tok.eod},
        "dtype": tok.dtype,
        "max_doc_mb": cfg.max_doc_mb,
        "skip_bad_lines": cfg.skip_bad_lines,
    }


def _plan_id(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]


class _Progress:
    """A tqdm bar with ETA on a terminal; a plain line every ``every`` seconds in batch logs."""

    def __init__(self, total_bytes: int, live: bool | None, every: float = 10.0, label: str = "preprocess",
                 already: int = 0):
        self.total = max(1, total_bytes)
        self.live = sys.stderr.isatty() if live is None else live
        self.every = every
        self.label = label
        self.t0 = self.last = time.monotonic()
        self.first = already  # work a resumed run had already done: not part of the rate
        self.bar: Any = None
        if self.live:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=already, unit="B", unit_scale=True, unit_divisor=1024,
                            desc=label, file=sys.stderr, dynamic_ncols=True)

    def update(self, done_bytes: int, docs: int, tokens: int, shards: str, final: bool = False) -> None:
        now = time.monotonic()
        dt = max(now - self.t0, 1e-9)
        if self.bar is not None:
            self.bar.n = done_bytes
            self.bar.set_postfix_str(f"shards {shards} docs {docs:,} tokens {tokens:,} {tokens / dt:,.0f} tok/s",
                                     refresh=True)
            if final:
                self.bar.close()
            return
        if not (final or now - self.last >= self.every):
            return
        self.last = now
        rate = (done_bytes - self.first) / dt
        eta = (self.total - done_bytes) / rate if rate > 0 else float("nan")
        print(f"{self.label}: {100 * done_bytes / self.total:5.1f}% shards {shards} docs {docs:,} "
              f"tokens {tokens:,} {docs / dt:,.0f} docs/s {tokens / dt:,.0f} tok/s {rate / 2**20:,.1f} MB/s "
              f"eta {_clock(eta)}", file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    if seconds != seconds:  # nan: no rate yet
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def preprocess(cfg: PreprocessConfig, log: Any = print, after_merge: Callable[[list[str]], None] | None = None) -> dict:
    """Run (or resume, or skip when already done) a preprocessing job or one task of it; returns the summary.
    ``after_merge`` runs in the process that merged, still holding the merge lock
    (:func:`.part_locks.merge_settled`), with the run dirs the tasks registered (``run_dir``)."""
    t0 = time.monotonic()
    cfg.check()
    tok = load_tokenizer(cfg.tokenizer, cfg.data_dir, cfg.engine, verified=False, log=log)
    try:
        plan = _plan(cfg, tok)
    except (InputError, sources.SourceError) as exc:
        raise PreprocessError(str(exc)) from None
    plan_id = _plan_id(plan)
    record_path = f"{cfg.output_prefix}.mtk-preprocess.json"
    done = _done_record(cfg, record_path, plan_id)
    if done is not None:
        log(f"preprocess: {cfg.output_prefix} is complete for these inputs and tokenizer; nothing to do")
        return {**done["summary"], "already_done": True}
    parent = os.path.dirname(os.path.abspath(cfg.output_prefix))
    os.makedirs(parent, exist_ok=True)
    if cfg.task_index is None and not cfg.merge_only:
        with exclusive(f"{cfg.output_prefix}.mtk-lock"):
            summary = _run_locked(cfg, tok, plan, plan_id, record_path, log, t0)
            _print_summary(summary, log)
            if after_merge is not None:
                after_merge([])
        return summary
    return _run_task(cfg, tok, plan, plan_id, record_path, log, t0, after_merge)


def _done_record(cfg: PreprocessConfig, record_path: str, plan_id: str) -> dict | None:
    outputs = [p for key in cfg.json_keys for p in cfg.output_paths(key)]
    if os.path.isfile(record_path) and all(os.path.isfile(p) for p in outputs):
        with open(record_path) as fh:
            record = json.load(fh)
        if record.get("plan_id") == plan_id:
            return record
    return None


def _run_task(cfg: PreprocessConfig, tok: Tokenizer, plan: dict, plan_id: str, record_path: str, log: Any,
              t0: float, after_merge: Callable[[list[str]], None] | None = None) -> dict:
    """One task of a sharded job: its slice of the plan, a task marker, then the merge if it is the last."""
    from .sharding import owner, task_shards

    parts_dir = f"{cfg.output_prefix}.mtk-parts"
    shards = [Shard(**s) for s in plan["shards"]]
    task: dict = {}
    if not cfg.merge_only:
        index = int(cfg.task_index or 0)
        mine = task_shards(shards, cfg.tasks, index)
        with task_lock(cfg.output_prefix, index, log):
            if _done_record(cfg, record_path, plan_id) is not None:  # merged while this task waited or started
                forget_task_lock(cfg.output_prefix, index)
                log(f"preprocess: another task has merged {cfg.output_prefix}; this task is done")
                return {"task": index, "merged": False, "already_done": True}
            _ensure_manifest(parts_dir, plan, plan_id)
            if cfg.run_dir:
                register_run(parts_dir, cfg.run_dir)
            log(f"preprocess: task {index} of {cfg.tasks}: {len(mine)} of {len(shards)} shards "
                f"({sum(s.nbytes for s in mine) / 2**20:,.1f} MiB)")
            results, tok = _run_shards(cfg, tok, mine, parts_dir, log, label=f"preprocess task {index}")
            task = _task_summary(index, cfg.tasks, mine, results, time.monotonic() - t0)
            with contextlib.suppress(FileNotFoundError):  # a peer that saw our last shard done merged already
                atomic_json(os.path.join(parts_dir, f"task-{index:05d}.json"), task)
        log(f"preprocess: task {index} done: {task['docs']:,} docs, {task['tokens']:,} tokens, "
            f"{task['skipped']:,} skipped, {task['seconds']:.1f} s")
    missing = [s.index for s in shards if not os.path.isfile(done_path(parts_dir, s.index))]
    if missing and _done_record(cfg, record_path, plan_id) is not None:
        log(f"preprocess: another task has merged {cfg.output_prefix}; this task is done")
        return {**task, "merged": False}
    if missing:
        if cfg.merge_only:
            own = owner(shards, cfg.tasks)
            tasks = sorted({own[i] for i in missing})
            raise PreprocessError(f"cannot merge {cfg.output_prefix}: shards {_ranges(missing)} are not done "
                                  f"(tasks {_ranges(tasks)}); rerun those tasks first")
        log(f"preprocess: {len(missing)} shards of other tasks still running; the last task to finish merges")
        return {**task, "merged": False}
    try:
        lock = exclusive(f"{cfg.output_prefix}.mtk-lock")
        lock.__enter__()
    except PreprocessError:
        log("preprocess: another task is merging; this task is done")
        return {**task, "merged": False}
    try:
        if _done_record(cfg, record_path, plan_id) is not None:
            log(f"preprocess: another task has merged {cfg.output_prefix}; this task is done")
            return {**task, "merged": False}
        results = _completed(parts_dir, shards)
        summary = _finish(cfg, tok, shards, results, parts_dir, plan, time.monotonic() - t0)
        summary["tasks"] = cfg.tasks
        summary["task_seconds"] = task_seconds(parts_dir)
        atomic_json(record_path, {"plan_id": plan_id, "summary": summary})
        runs = remove_parts(cfg.output_prefix, cfg.tasks, parts_dir, log)
        _print_summary(summary, log)
        if after_merge is not None:
            after_merge(runs)
    finally:
        lock.__exit__(None, None, None)
    return {**summary, "merged": True}


def task_seconds(parts_dir: str) -> dict[str, float]:
    """Seconds each finished task took (its marker), for `mtk status`'s slowest shard."""
    out: dict[str, float] = {}
    try:
        names = sorted(os.listdir(parts_dir))
    except OSError:  # none yet, or the merge has just removed them (`mtk status` reads while a run goes on)
        return out
    for name in names:
        if name.startswith("task-") and name.endswith(".json"):
            try:
                with open(os.path.join(parts_dir, name)) as fh:
                    task = json.load(fh)
                out[str(task["task"])] = float(task["seconds"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return out


def _ensure_manifest(parts_dir: str, plan: dict, plan_id: str) -> None:
    """Pin the plan all tasks share; parts of another plan are never mixed in (or deleted under a peer)."""
    manifest_path = os.path.join(parts_dir, "manifest.json")
    if os.path.isfile(manifest_path):
        with open(manifest_path) as fh:
            if json.load(fh).get("plan_id") != plan_id:
                raise PreprocessError(f"{parts_dir} holds parts of a different plan (inputs, tokenizer, shard "
                                      "count or settings changed since they were written); once no task of the "
                                      f"old job runs, delete {parts_dir} and rerun")
        return
    os.makedirs(parts_dir, exist_ok=True)
    atomic_json(manifest_path, {"plan_id": plan_id, "plan": plan})


def _task_summary(index: int, tasks: int, mine: list[Shard], results: dict[int, ShardResult],
                  seconds: float) -> dict:
    rs = [results[s.index] for s in mine]
    return {"task": index, "tasks": tasks, "shards": [s.index for s in mine], "docs": sum(r.docs for r in rs),
            "tokens": sum(r.tokens for r in rs), "input_bytes": sum(r.input_bytes for r in rs),
            "skipped": sum(sum(r.skipped_by_reason.values()) for r in rs), "seconds": round(seconds, 3)}


def _ranges(nums: list[int]) -> str:
    out: list[str] = []
    for n in sorted(nums):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def _run_locked(cfg: PreprocessConfig, tok: Tokenizer, plan: dict, plan_id: str, record_path: str, log: Any,
                t0: float) -> dict:
    parts_dir = f"{cfg.output_prefix}.mtk-parts"
    manifest_path = os.path.join(parts_dir, "manifest.json")
    if os.path.isfile(manifest_path):
        with open(manifest_path) as fh:
            if json.load(fh).get("plan_id") != plan_id:
                log(f"preprocess: inputs or tokenizer changed since the interrupted run; starting over in {parts_dir}")
                shutil.rmtree(parts_dir)
    os.makedirs(parts_dir, exist_ok=True)
    if not os.path.isfile(manifest_path):
        atomic_json(manifest_path, {"plan_id": plan_id, "plan": plan})
    shards = [Shard(**s) for s in plan["shards"]]
    results, tok = _run_shards(cfg, tok, shards, parts_dir, log)
    summary = _finish(cfg, tok, shards, results, parts_dir, plan, time.monotonic() - t0)
    atomic_json(record_path, {"plan_id": plan_id, "summary": summary})
    shutil.rmtree(parts_dir, ignore_errors=True)
    return summary


def _completed(parts_dir: str, shards: list[Shard]) -> dict[int, ShardResult]:
    done = {}
    for s in shards:
        path = done_path(parts_dir, s.index)
        if os.path.isfile(path):
            with open(path) as fh:
                done[s.index] = ShardResult(**json.load(fh))
    return done


def _run_shards(cfg: PreprocessConfig, tok: Tokenizer, shards: list[Shard], parts_dir: str,
                log: Any, label: str = "preprocess") -> tuple[dict[int, ShardResult], Tokenizer]:
    """Process every shard without a done marker; returns the results and the tokenizer that made them."""
    from .bpe_fast import FastPathMismatch

    results = _completed(parts_dir, shards)
    if results:
        log(f"preprocess: resuming: {len(results)}/{len(shards)} shards already done")
    todo = [s for s in shards if s.index not in results]
    workers = max(1, min(cfg.workers or len(os.sched_getaffinity(0)), len(todo) or 1))
    max_line = int(cfg.max_doc_mb * 2**20)
    sizes = {s.index: _shard_size(s) for s in shards}
    done_bytes = sum(sizes[i] for i in results)
    progress = _Progress(sum(sizes.values()), cfg.progress, label=label, already=done_bytes)
    args = [(s, parts_dir, cfg.json_keys, cfg.append_eod, cfg.skip_bad_lines, max_line) for s in todo]
    try:
        for res in _map(cfg, tok, args, workers):
            results[res.index] = res
            done_bytes += sizes[res.index]
            progress.update(done_bytes, sum(r.docs for r in results.values()),
                            sum(r.tokens for r in results.values()), f"{len(results)}/{len(shards)}")
        progress.update(done_bytes, sum(r.docs for r in results.values()),
                        sum(r.tokens for r in results.values()), f"{len(results)}/{len(shards)}", final=True)
    except FastPathMismatch as exc:
        log(f"preprocess: WARNING {exc}; redoing every shard with the reference engine")
        mine = {f"shard-{s.index:06d}." for s in shards}  # a task redoes its own shards, never a peer's
        for name in os.listdir(parts_dir):
            if name[:13] in mine:
                os.unlink(os.path.join(parts_dir, name))
        cfg.engine = "hf"
        return _run_shards(cfg, load_tokenizer(cfg.tokenizer, cfg.data_dir, "hf", False, log), shards,
                           parts_dir, log, label)
    return results, tok


def _shard_size(s: Shard) -> int:
    return s.nbytes


def _map(cfg: PreprocessConfig, tok: Tokenizer, args: list[tuple[Shard, str, list[str], bool, bool, int]],
         workers: int):
    """Results of process_shard over ``args``: in this process for one worker, else a pool of processes.

    On Linux the pool forks this process once the tokenizer is loaded, so every worker starts with it and with
    every import (a spawned worker re-imported and re-built both: ~1.5 CPU s per worker, a tenth of a 100 MB
    corpus's work on two cores); elsewhere (macOS forbids forking a process that has used its system
    frameworks) the workers are spawned and build their own.
    """
    if workers == 1:
        for a in args:
            yield process_shard(*a, tok=tok)
        return
    import multiprocessing

    from .bpe_fast import FastGPT2

    if sys.platform == "linux":
        ctx = multiprocessing.get_context("fork")
        # Set before the fork: the Rust tokenizers library must not use the thread pool the parent started.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        inherit_tokenizer(tok)
        init: tuple = ()
    else:
        ctx = multiprocessing.get_context("spawn")
        init = (cfg.tokenizer.model_dump_json(), cfg.data_dir, "auto" if isinstance(tok, FastGPT2) else "hf")
    with ctx.Pool(workers, initializer=init_worker, initargs=init) as pool:
        yield from pool.imap_unordered(run_one, args)


def _finish(cfg: PreprocessConfig, tok: Tokenizer, shards: list[Shard], results: dict[int, ShardResult],
            parts_dir: str, plan: dict, elapsed: float) -> dict:
    from .indexed import merge_parts

    if not any(results[s.index].docs for s in shards) and not cfg.allow_empty:
        raise PreprocessError(f"{cfg.input}: no documents (only blank or skipped lines); check the input, or set "
                              "data.corpus.allow_empty (--allow-empty) if an empty output is intended")
    outputs = {}
    for key in cfg.json_keys:
        bin_path, idx_path = cfg.output_paths(key)
        parts = [part_files(parts_dir, s.index, key) for s in shards]
        n_seq, n_doc = merge_parts(parts, tok.dtype, bin_path, idx_path)
        outputs[key] = {"bin": bin_path, "idx": idx_path, "sequences": n_seq, "documents": n_doc}
    rs = [results[s.index] for s in shards]
    by_reason: Counter[str] = Counter()
    for r in rs:
        by_reason.update(r.skipped_by_reason)
    docs = sum(r.docs for r in rs)
    mb = sum(r.input_bytes for r in rs) / 2**20
    return {
        "output_prefix": cfg.output_prefix,
        "outputs": outputs,
        "docs": docs,
        "empty_docs": sum(r.empty_docs for r in rs),
        "blank_lines": sum(r.blank_lines for r in rs),
        "tokens": sum(r.tokens for r in rs),
        "skipped_lines": sum(by_reason.values()),
        "skipped_by_reason": dict(by_reason),
        "skipped_examples": [e for r in rs for e in r.skipped_examples][:MAX_EXAMPLES],
        "input_mb": round(mb, 3),
        "seconds": round(elapsed, 3),
        "docs_per_s": round(docs / max(elapsed, 1e-9), 1),
        "mb_per_s": round(mb / max(elapsed, 1e-9), 3),
        "tokenizer": plan["tokenizer"],
        "engine": type(tok).__name__,
    }


def _print_summary(s: dict, log: Any) -> None:
    log(f"preprocess: done: {s['docs']:,} docs ({s['empty_docs']:,} empty), {s['tokens']:,} tokens in "
        f"{s['seconds']:.1f} s = {s['docs_per_s']:,.0f} docs/s, {s['mb_per_s']:.1f} MB/s [{s['engine']}]")
    if s["skipped_lines"]:
        log(f"preprocess: SKIPPED {s['skipped_lines']} bad lines: {s['skipped_by_reason']}")
        for ex in s["skipped_examples"]:
            log(f"  e.g. {ex}")
    if s["blank_lines"]:
        log(f"preprocess: ignored {s['blank_lines']} blank lines")
    for key, out in s["outputs"].items():
        log(f"preprocess: {key}: {out['bin']} + .idx ({out['sequences']:,} sequences, {out['documents']:,} docs)")
