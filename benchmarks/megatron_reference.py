"""The reference path, run the way Megatron-LM's tools/preprocess_data.py runs it.

A multiprocessing pool whose workers each build the tokenizer (current Megatron's GPT2BPETokenizer:
transformers' fast GPT-2 tokenizer from vocab.json + merges.txt), ``pool.imap(encode, lines, 32)`` with one
JSON document per task, ids + EOD, and megatron.core's ``IndexedDatasetBuilder`` in the parent.

    python benchmarks/megatron_reference.py INPUT.jsonl OUTPUT_PREFIX VOCAB_DIR --workers N
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time

_TOK = None


def _init(vocab_dir: str) -> None:
    global _TOK
    from transformers import GPT2TokenizerFast

    _TOK = GPT2TokenizerFast.from_pretrained(vocab_dir)


def _encode(line: str) -> tuple[list[int], int]:
    text = json.loads(line)["text"]
    ids = _TOK(text)["input_ids"]
    if ids:
        ids.append(_TOK.eos_token_id)
    return ids, len(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output_prefix")
    ap.add_argument("vocab_dir")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)

    import numpy as np
    from mtk.training.compat import install_import_stubs

    install_import_stubs()
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    _init(args.vocab_dir)
    dtype = np.uint16 if len(_TOK) < 65500 else np.int32
    builder = IndexedDatasetBuilder(f"{args.output_prefix}_text_document.bin", dtype=dtype)
    t0 = time.monotonic()
    docs = 0
    pool = multiprocessing.Pool(args.workers, _init, (args.vocab_dir,))
    with open(args.input, encoding="utf-8") as fin, pool:
        for ids, _ in pool.imap(_encode, fin, 32):
            builder.add_document(np.array(ids, dtype=np.int64), [len(ids)] if ids else [])
            docs += 1
    builder.finalize(f"{args.output_prefix}_text_document.idx")
    print(json.dumps({"docs": docs, "seconds_after_imports": time.monotonic() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
