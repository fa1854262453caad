"""Build megatron-core's GPTDataset index cache once, right after the merge, into the shared data dir.

The cache (document/sample/shuffle indices) depends on the run's sequence length, split, seed and sample counts;
it is exactly what the training ranks would build at start-up, built here by one process so start-up does not
depend on node count and no rank has to build it (Megatron-LM #907, #795). Where megatron-core is not installed
(a data-only environment) the step says so and training builds the cache as before.
"""

from __future__ import annotations

import os
import time
from typing import Any


def build_index_cache(job_json: str, log: Any = print) -> str | None:
    """Build (or load, when present) the run's dataset indices; returns the cache dir, or None when skipped."""
    import importlib.util

    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("torch") is None:
        log("index cache: megatron-core is not installed in this environment; the training ranks build it")
        return None
    from mtk.training import compat, quiet

    quiet.single_process()  # megatron-core's import-time TE/Apex notes and its rank guess: this process is rank 0
    compat.install_import_stubs()  # what the training worker does before importing megatron.core
    from mtk.training import data

    from mtk.spec import load_job_json

    job = load_job_json(job_json)
    t0 = time.monotonic()
    # megatron-core's rank helpers look for a rank in the environment; this one process is rank 0. Only for the
    # build: a LOCAL_RANK left behind would make every later child of this process look like a training rank.
    set_here = "LOCAL_RANK" not in os.environ
    os.environ.setdefault("LOCAL_RANK", "0")
    try:
        train, valid = data.build_datasets(job, data.tokenizer_info(job), log=log)
    except (ValueError, RuntimeError) as exc:  # e.g. a split that gives a part no documents
        log(f"index cache: WARNING not built ({exc}); the dataset itself is complete, but training will stop on "
            "the same problem: fix it before launching training")
        return None
    finally:
        if set_here:
            os.environ.pop("LOCAL_RANK", None)
    where = data.cache_dir(job)
    log(f"index cache: {len(train):,} train / {len(valid) if valid is not None else 0:,} valid samples of "
        f"{job.model.seq_length} tokens (seed {job.train.seed}, split {job.data.split}) ready in {where} "
        f"({time.monotonic() - t0:.1f} s)")
    return where
