"""Strict-device mode would have caught the engine's GPU bugs on CPU (torchrun, 2 ranks, gloo, TP=2).

``strict_device_driver.py`` replays, rank by rank, what the engine did before it was made GPU-true — the
loader's host batch handed to the model, a model chunk never ``.cuda()``'d, the per-step and evaluation
reductions built on the host and all-reduced on the default (NCCL on GPU) group — and what it does now.
Each pre-fix replay must fail with a StrictDeviceError naming the driver line that made the call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DRIVER = Path(__file__).with_name("strict_device_driver.py")


def _site(name: str) -> str:
    """``strict_device_driver.py:<line>`` of the line marked ``# SITE:<name>``."""
    for number, line in enumerate(DRIVER.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# SITE:{name}"):
            return f"{DRIVER}:{number}"
    raise AssertionError(f"no SITE:{name} marker in {DRIVER}")


@pytest.fixture(scope="module")
def replay(tr, engine_root) -> list[dict]:
    d = engine_root / "strict_device"
    tr.make_job(d, "parallel.tp=2")
    out = d / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(DRIVER),
           str(d / "job.json"), str(out)]
    proc = subprocess.run(cmd, cwd=d, env=tr.env(None), capture_output=True, text=True, timeout=tr.RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_batch_left_on_the_host_fails_at_the_forward_call(replay):
    for rank in replay:
        msg = rank["batch"]
        assert msg.startswith("StrictDeviceError") and _site("batch") in msg, msg
        assert "argument 0" in msg and "not on the accelerator" in msg


def test_labels_left_on_the_host_fail_too(replay):
    for rank in replay:
        msg = rank["labels"]
        assert msg.startswith("StrictDeviceError") and _site("labels") in msg and "labels=" in msg, msg


def test_model_never_moved_fails_at_the_forward_call(replay):
    for rank in replay:
        msg = rank["model"]
        assert msg.startswith("StrictDeviceError") and _site("model") in msg, msg
        assert "never moved to the accelerator" in msg


def test_host_tensor_all_reduced_on_the_default_group_fails(replay):
    for rank in replay:
        for name in ("red", "eval"):
            msg = rank[name]
            assert msg.startswith("StrictDeviceError") and _site(name) in msg, msg
            assert "torch.distributed.all_reduce" in msg and "NCCL" in msg


def test_the_engines_current_path_passes_and_reduces(replay):
    sums = []
    for rank in replay:
        msg = rank["fixed"]
        assert msg.startswith("no error: "), msg
        sums.append(json.loads(msg.removeprefix("no error: ")))
    # both TP ranks hold the same micro-batch loss; the all-reduce summed the two (sum, count) pairs
    assert sums[0] == sums[1] and sums[0][1] == 2.0 and sums[0][0] > 0


def test_context_parallel_ranks_get_megatrons_load_balanced_chunks(replay):
    seq = 64  # examples/tiny.yaml
    q = seq // 4
    expected = [list(range(0, q)) + list(range(3 * q, seq)), list(range(q, 3 * q))]
    for rank, rows in zip(replay, expected, strict=True):
        mine = json.loads(rank["cp"])
        assert mine["tokens"] == rows and mine["position_ids"] == rows
        assert mine["labels"] == [r + 1 for r in rows] and len(mine["loss_mask"]) == seq // 2
        assert rank["cp_on_device"] == "True"  # the slices are still accelerator tensors for the forward
