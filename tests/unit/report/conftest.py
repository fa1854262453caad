"""Synthetic metrics files shaped like mtk.training.metrics writes them (see its module docstring)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest


def train_record(it: int, restart_count: int = 0, rng: random.Random | None = None, **over) -> dict:
    rng = rng or random.Random(it)
    step_ms = 200.0 + rng.uniform(-20, 60)
    tokens = 8 * 1024 / (step_ms / 1e3)
    rec = {
        "kind": "train", "iteration": it, "consumed_samples": it * 8, "lm_loss": 10.5 * math.exp(-it / 12) + 2.0
        + rng.uniform(-0.05, 0.05), "lr": 1e-3 * min(1.0, it / 3), "grad_norm": 5.0 / (1 + it / 4),
        "loss_scale": 1.0, "step_time_ms": step_ms, "tokens_per_s": tokens, "tflops_per_gpu": tokens * 6 * 124e6 / 8e12,
        "flops_convention": "megatron-lm",
        "skipped": 0, "nan": 0, "global_batch_size": 8, "restart_count": restart_count, "time": 1.7e9 + it,
        "some_future_key": {"ignored": True},
    }
    rec.update(over)
    return rec


def eval_record(it: int, restart_count: int = 0) -> dict:
    loss = 10.5 * math.exp(-it / 12) + 2.1
    return {"kind": "eval", "iteration": it, "lm_loss": loss, "ppl": math.exp(loss), "restart_count": restart_count,
            "time": 1.7e9 + it + 0.5}


def resumed_run_records() -> list[dict]:
    """30 iterations, log_interval 1, eval every 10; the job crashed after iteration 22 and was requeued from
    the checkpoint at 15, so 16..22 are logged twice (7 iterations lost, 1 restart)."""
    rng = random.Random(0)
    recs: list[dict] = []
    for it in range(1, 23):
        recs.append(train_record(it, 0, rng))
        if it % 10 == 0:
            recs.append(eval_record(it, 0))
    for it in range(16, 31):
        recs.append(train_record(it, 1, rng))
        if it % 10 == 0:
            recs.append(eval_record(it, 1))
    return recs


def write_metrics(run_dir: Path, records: list[dict], tail: str = "") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


@pytest.fixture
def resumed_run(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A run dir whose metrics end in a line cut mid-write, plus the records that were written whole."""
    recs = resumed_run_records()
    run_dir = tmp_path / "tiny-20260101-000000"
    write_metrics(run_dir, recs, tail=json.dumps(train_record(31, 1))[:57])
    (run_dir / "job.json").write_text(json.dumps({"name": "tiny", "cluster": {"device": "cpu"},
                                                  "train": {"log_interval": 1}}))
    return run_dir, recs


@pytest.fixture
def synth() -> SimpleNamespace:
    """The record builders above, for test modules (importlib import mode: conftest is not importable)."""
    return SimpleNamespace(train_record=train_record, eval_record=eval_record,
                           resumed_run_records=resumed_run_records, write_metrics=write_metrics)
