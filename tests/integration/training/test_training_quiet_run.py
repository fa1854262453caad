"""A real run's log (torchrun, 2 CPU ranks, gloo, TP=2, a checkpoint save) carries none of the warnings
``training/quiet.py`` names as noise, while a warning nobody expected still shows (issued in every rank by a
test-only ``sitecustomize`` once the engine imports megatron-core's optimizer)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SITE = Path(__file__).with_name("quiet_site")
# What megatron-core / torch print on main without the filters (captured from `mtk launch examples/tiny.yaml`).
NOISE = (
    "Apex is not installed",
    "Transformer Engine and Apex are not installed",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "full scope is deprecated",
    "MimoModelConfig is experimental",
    "GPTModel IS DEPRECATED",
    "Rerun State Machine",
    "RerunStateMachine initialized",
    "async save is deprecated",
    "deprecating ShardedTensor",
)


@pytest.mark.parametrize("sets", [["parallel.tp=2"], ["parallel.tp=2", "parallel.sequence_parallel=true"]],
                         ids=["tp2-async-allreduce", "tp2-sequence-parallel"])
def test_a_run_prints_no_known_noise_but_still_unexpected_warnings(tr, engine_root, sets):
    run_dir = engine_root / ("quiet-" + "-".join(s.split("=")[0].split(".")[-1] for s in sets))
    tr.make_job(run_dir, *sets, "train.iterations=2", "train.lr_warmup_iters=1", "train.checkpoint.save_interval=2")
    path = os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = tr.start(run_dir, env={"PYTHONPATH": path})
    assert tr.finish(proc) == 0, tr.tail(proc)
    log = Path(proc.log_path).read_text(errors="replace")
    assert "saved iteration 2" in log, tr.tail(proc)
    leaked = [n for n in NOISE if n in log]
    assert not leaked, f"known noise in the run's log: {leaked}\n{tr.tail(proc, 120)}"
    assert log.count("mtk-test: an unexpected warning in the middle of a run") == 2, tr.tail(proc, 120)
