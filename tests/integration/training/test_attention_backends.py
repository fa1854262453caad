"""torch SDPA core attention and torch's fused Adam (#38) compute what megatron-core's unfused attention and torch's
foreach Adam compute, and checkpoints cross between them.

* The module: output and query/key/value gradients equal ``DotProductAttention``'s within fp32 rounding, at TP=2
  on gloo (causal, GQA, an explicit mask, query-key layer scaling, a given softmax scale).
* Runs (torchrun, 2 CPU ranks, TP=2, fp32): the tiny job with ``model.attention_backend: sdpa`` and the fused
  Adam kernel logs the losses of the default (unfused attention, foreach Adam) within 1e-5 relative over 10
  iterations; a checkpoint written by either, resumed by the other, continues on the same losses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
FUSED_ADAM = {"PYTHONPATH": os.pathsep.join([str(HERE / "fused_adam_site"), os.environ.get("PYTHONPATH", "")])
              .rstrip(os.pathsep)}
RTOL = 1e-5


def test_sdpa_core_attention_matches_dot_product_attention_at_tp2(tmp_path, tr):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(HERE / "sdpa_driver.py"), str(tmp_path)], capture_output=True, text=True,
                          env=tr.env(None), timeout=tr.RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        cases = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert sorted(cases) == ["causal", "causal_gqa", "explicit_mask_gqa", "layer_scaling", "softmax_scale"]
        for name, case in cases.items():
            assert case["shape"] == [16, 3, 32], (rank, name)  # [sq, b, heads per rank × head dim]
            for what, diff in case["diff"].items():
                assert diff <= 1e-5 * max(1.0, case["magnitude"]), (rank, name, what, diff)


def _losses(tr, run_dir: Path) -> dict[int, float]:
    return {i: r["lm_loss"] for i, r in tr.by_iteration(run_dir).items()}


def _close(ours: dict[int, float], ref: dict[int, float], iterations: range, what: str) -> None:
    assert sorted(ours) == list(iterations), (what, sorted(ours))
    for i in iterations:
        assert abs(ours[i] - ref[i]) <= RTOL * abs(ref[i]), (what, i, ours[i], ref[i])


@pytest.fixture(scope="module")
def backend_runs(tr, engine_root):
    """The default run and the SDPA + fused-Adam run, each 10 iterations saving at 5 and 10."""
    runs = {}
    for name, sets, env in (("unfused", [], None), ("sdpa", ["model.attention_backend=sdpa"], FUSED_ADAM)):
        run_dir = engine_root / f"attn-{name}"
        tr.make_job(run_dir, *sets, "train.iterations=10", "train.checkpoint.save_interval=5")
        proc = tr.start(run_dir, env=env)
        assert tr.finish(proc) == 0, tr.tail(proc)
        runs[name] = (run_dir, Path(proc.log_path).read_text(errors="replace"))
    return runs


def test_sdpa_with_fused_adam_trains_on_the_default_runs_losses(tr, backend_runs):
    (ref_dir, ref_log), (sdpa_dir, sdpa_log) = backend_runs["unfused"], backend_runs["sdpa"]
    assert "attention: megatron-core unfused" in ref_log and "Adam: torch foreach" in ref_log
    assert "attention: torch SDPA (flash/cuDNN)" in sdpa_log and "Adam: torch fused" in sdpa_log
    ref = _losses(tr, ref_dir)
    _close(_losses(tr, sdpa_dir), ref, range(1, 11), "sdpa + fused Adam vs unfused + foreach")
    assert ref[10] < ref[1]


@pytest.mark.parametrize(("source", "sets", "env"), [
    ("unfused", ["model.attention_backend=sdpa"], FUSED_ADAM),
    ("sdpa", ["model.attention_backend=unfused"], None),
], ids=["unfused-foreach-to-sdpa-fused", "sdpa-fused-to-unfused-foreach"])
def test_a_checkpoint_resumes_across_attention_and_adam_kernels(tr, engine_root, backend_runs, source, sets, env):
    src_dir = backend_runs[source][0]
    run_dir = engine_root / f"attn-resume-from-{source}"
    tr.make_job(run_dir, *sets, "train.iterations=10", "train.checkpoint.save_interval=5")
    tr.copy_checkpoint(src_dir / "checkpoints", 5, run_dir)
    proc = tr.start(run_dir, env=env)
    assert tr.finish(proc) == 0, tr.tail(proc)
    assert "at iteration 5" in Path(proc.log_path).read_text(errors="replace"), tr.tail(proc)
    _close(_losses(tr, run_dir), _losses(tr, backend_runs["unfused"][0]), range(6, 11), f"resumed from {source}")
