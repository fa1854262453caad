"""``mtk-entrypoint preprocess``: the command line (Megatron's ``tools/preprocess_data.py`` flags, or ``--job``
to take ``data.corpus`` and ``data.tokenizer`` from the spec) over :func:`.preprocess.preprocess`.

    mtk-entrypoint preprocess --job RUN/job.json            # data.corpus + data.tokenizer from the spec
    mtk-entrypoint preprocess --job RUN/job.json --task-index 2 --tasks 4   # one task of a sharded job
    mtk-entrypoint preprocess --input X.jsonl --output-prefix out/x --tokenizer-type GPT2BPETokenizer \\
        --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 8   # Megatron's own flags
"""

from __future__ import annotations

import argparse
import os
import sys

from mtk.suggest import ArgumentParser

from .preprocess import ON_ERROR, PreprocessConfig, PreprocessError, preprocess


def _number(kind: type, low: float, strict: bool = False):
    """An argparse type: a ``kind`` number ≥ low (> low when strict); argparse names the flag and exits 2."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if value != value or value in (float("inf"), float("-inf")) or (value <= low if strict else value < low):
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be {'>' if strict else '≥'} {low:g}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="mtk-entrypoint preprocess", description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", help="job.json: take data.corpus and data.tokenizer from the spec")
    ap.add_argument("--run-dir", help="run directory: once the dataset is complete and no preprocess is still "
                    "writing it or its index cache, state/data-ready.json there says so (what EKS training pods "
                    "wait for)")
    meg = ap.add_argument_group("Megatron tools/preprocess_data.py flags")
    meg.add_argument("--input")
    meg.add_argument("--output-prefix")
    meg.add_argument("--json-keys", nargs="+")
    meg.add_argument("--tokenizer-type",
                     choices=["GPT2BPETokenizer", "HuggingFaceTokenizer", "GPTSentencePieceTokenizer"])
    meg.add_argument("--vocab-file")
    meg.add_argument("--merge-file")
    meg.add_argument("--tokenizer-model")
    meg.add_argument("--append-eod", action="store_true", default=None)
    meg.add_argument("--workers", type=_number(int, 1), help="processes (default: one per CPU this task may use)")
    meg.add_argument("--split-sentences", action="store_true", help="not supported (sentence splitting)")
    for ignored in ("--partitions", "--log-interval", "--keep-sequential-samples", "--keep-newlines"):
        meg.add_argument(ignored, nargs="?", const=True, help=argparse.SUPPRESS)
    ext = ap.add_argument_group("mtk")
    ext.add_argument("--skip-bad-lines", action="store_true", default=None,
                     help="same as --on-error skip-and-count")
    ext.add_argument("--on-error", choices=ON_ERROR, help="a bad line/row: stop (fail, the default) or skip and count")
    ext.add_argument("--allow-empty", action="store_true", default=None, help="an input without documents is ok")
    shard = ap.add_argument_group("sharded job (data.corpus.shards)")
    shard.add_argument("--tasks", type=_number(int, 1),
                       help="tasks of the sharded job (default: data.corpus.shards, or 1)")
    shard.add_argument("--task-index", type=_number(int, 0),
                       help="this task's index (default: $SLURM_ARRAY_TASK_ID or $JOB_COMPLETION_INDEX when "
                            "the job is sharded; none: do every task's shards here)")
    shard.add_argument("--merge", action="store_true", help="only merge the finished tasks' parts")
    ext.add_argument("--legacy-eod-as-text", action="store_true", default=None)
    ext.add_argument("--engine", choices=["auto", "hf"], default="auto",
                     help="auto: verified fast BPE engine where it applies; hf: reference libraries only")
    ext.add_argument("--shard-mb", type=_number(float, 0, strict=True),
                     help="shard size (default: input size / 64, within 1-64 MiB)")
    ext.add_argument("--max-doc-mb", type=_number(float, 0, strict=True), default=16.0,
                     help="longest document (MiB); a longer one is a bad line")
    ext.add_argument("--no-progress", action="store_true")
    return ap


def config_from_args(argv: list[str]) -> PreprocessConfig:
    """Build the config from ``--job`` and/or Megatron-style flags (flags override the spec)."""
    from mtk.spec.data import TokenizerSpec

    args = _parser().parse_args(argv)
    if args.split_sentences:
        raise PreprocessError("--split-sentences is not supported: mtk writes one sequence per document")
    if args.job:
        from mtk.spec import load_job_json

        data = load_job_json(args.job).data
        job_path = args.job
        if data.corpus is None:
            raise PreprocessError(f"{args.job}: data.corpus is not set; there is nothing to preprocess")
        c = data.corpus
        cfg = PreprocessConfig(input=data.resolve(c.input), output_prefix=data.resolve(c.output_prefix),
                               tokenizer=data.tokenizer, data_dir=data.dir, json_keys=list(c.json_keys),
                               append_eod=c.append_eod, workers=c.workers,
                               skip_bad_lines=c.skip_bad_lines or c.on_error == "skip-and-count",
                               tasks=c.shards, allow_empty=c.allow_empty, shard_mb=c.shard_mb, job=job_path)
    else:
        missing = [f for f, v in (("--input", args.input), ("--output-prefix", args.output_prefix),
                                  ("--tokenizer-type", args.tokenizer_type)) if not v]
        if missing:
            raise PreprocessError(f"missing {', '.join(missing)} (or pass --job JOB.json)")
        model = args.tokenizer_model
        if model and os.path.isdir(model) and args.tokenizer_type == "HuggingFaceTokenizer":
            model = os.path.join(model, "tokenizer.json")
        spec = TokenizerSpec(type=args.tokenizer_type, vocab_file=args.vocab_file, merge_file=args.merge_file,
                             model=model)
        cfg = PreprocessConfig(input=args.input, output_prefix=args.output_prefix, tokenizer=spec,
                               append_eod=False)
    if args.input:
        cfg.input = args.input
    if args.output_prefix:
        cfg.output_prefix = args.output_prefix
    if args.json_keys:
        cfg.json_keys = args.json_keys
    if args.append_eod:
        cfg.append_eod = True
    if args.workers is not None:
        cfg.workers = args.workers
    if args.skip_bad_lines or args.on_error == "skip-and-count":
        cfg.skip_bad_lines = True
    elif args.on_error == "fail":
        cfg.skip_bad_lines = False
    if args.allow_empty:
        cfg.allow_empty = True
    if args.tasks is not None:
        cfg.tasks = args.tasks
    cfg.run_dir = args.run_dir
    cfg.merge_only = args.merge
    if args.task_index is not None:
        cfg.task_index = args.task_index
    elif cfg.tasks > 1 and not args.merge:
        from .sharding import index_from_env

        try:
            cfg.task_index = index_from_env()
        except ValueError as exc:
            raise PreprocessError(str(exc)) from None
    if args.legacy_eod_as_text:
        cfg.tokenizer = cfg.tokenizer.model_copy(update={"legacy_eod_as_text": True})
    cfg.engine, cfg.max_doc_mb = args.engine, args.max_doc_mb
    if args.shard_mb is not None:
        cfg.shard_mb = args.shard_mb
    if args.no_progress:
        cfg.progress = False
    return cfg


def say(msg: str) -> None:
    print(msg, flush=True)


def _after_merge(cfg: PreprocessConfig, registered: list[str]) -> None:
    """In the process that merged, still under the merge lock: the training index cache, then the data-ready
    marker of its own run and of every run whose tasks waited for these parts (another run on this prefix)."""
    if cfg.job:
        from .index_cache import build_index_cache

        build_index_cache(cfg.job, log=say)
    for run_dir in sorted({*registered, *([os.path.abspath(cfg.run_dir)] if cfg.run_dir else [])}):
        try:
            _mark_ready(cfg, run_dir)
        except OSError as exc:  # another run's dir gone or not ours to write: that run's own tasks are told
            say(f"preprocess: could not mark {run_dir} data-ready ({exc})")


def _ready_when_merge_settled(cfg: PreprocessConfig, run_dir: str) -> None:
    """The dataset was complete when this task looked: once no merge runs (a peer may still be writing the
    index cache), mark it ready for this run unless the merging process has. (The cache of this run's settings
    may not exist, e.g. a relaunch with another sequence length: training builds it, as no one else writes it.)"""
    from mtk.run_layout import RunLayout

    from .part_locks import merge_settled

    with merge_settled(cfg.output_prefix, say):
        if not RunLayout.of(run_dir).data_ready.is_file():
            _mark_ready(cfg, run_dir)


def _mark_ready(cfg: PreprocessConfig, run_dir: str) -> None:
    import json
    import time

    from mtk.files import atomic_write
    from mtk.run_layout import RunLayout

    outputs = {key: cfg.output_paths(key) for key in cfg.json_keys}
    atomic_write(RunLayout.of(run_dir).data_ready,
                 json.dumps({"output_prefix": cfg.output_prefix, "outputs": outputs, "time": time.time()}, indent=1))


def main(argv: list[str] | None = None) -> int:
    """Exit codes (the error boundary's, from each error's class): 0 done (or already done), 1 a failure named on
    stderr (PreprocessError), 2 a bad flag (argparse) or job file (SpecError), 128 + N stopped by signal N (143 SIGTERM,
    130 SIGINT; finished shards kept, rerun to resume: :mod:`.stopping`)."""
    from .stopping import StepStopped, Stopped, stop_on_signals

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with stop_on_signals():
            cfg = config_from_args(argv)
            summary = preprocess(cfg, log=say, after_merge=lambda runs: _after_merge(cfg, runs))
            if summary.get("already_done") and cfg.run_dir:
                _ready_when_merge_settled(cfg, cfg.run_dir)
    except Stopped as exc:  # unwound through the pool and the locks: now the one line for the user
        raise StepStopped(f"stopped by {exc}: nothing under the output prefix was half-written; shards finished "
                          "so far are kept, and the same command resumes from them", exc.signum) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
