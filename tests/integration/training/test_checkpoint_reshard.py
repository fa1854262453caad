"""Resuming at a different TP/PP/DP than the checkpoint was written with (torchrun, 2 CPU ranks, gloo).

Each case trains the tiny model for 5 iterations in fp32 with a checkpoint at iteration 2 (the reference),
then resumes that checkpoint in a fresh run dir at another layout and trains iterations 3-5. The model's
math is the same at every layout in fp32, so the resumed losses differ from the reference's only by the
order of floating-point reductions (measured: |Δ loss| ≤ 1e-6 on this model); the tolerance is LOSS_TOL.
Iteration 3's loss depends only on the weights; iterations 4-5 also on the optimizer moments, step count
and LR schedule, and all iterations on the data position (the same global batch → the same samples).

The impossible reshard (a ``dp_reshardable`` distributed-optimizer checkpoint resumed at another tp) is
refused by ``mtk-entrypoint train`` before torchrun starts, and by the ranks before any step when torchrun
is started directly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

BASE = ("train.precision=fp32", "train.iterations=5", "train.lr_warmup_iters=1", "train.checkpoint.save_interval=2",
        "train.checkpoint.save_on_exit=false")
LOSS_TOL = 1e-5  # fp32: reduction order only (measured differences are below 1e-6)
GRAD_NORM_RTOL = 1e-4


def _reference(tr, engine_root, name: str, *sets: str, nproc: int = 2):
    d = engine_root / f"reshard_{name}"
    tr.make_job(d, *BASE, *sets)
    assert tr.run(d, nproc=nproc) == 0, (d / "run.log").read_text()[-4000:]
    return d


def _resume(tr, engine_root, ref, name: str, *sets: str, nproc: int = 2):
    """A fresh run dir holding only the reference's iteration-2 checkpoint, resumed at ``sets``."""
    d = engine_root / f"reshard_{name}"
    tr.make_job(d, *BASE, *sets)
    tr.copy_checkpoint(ref / "checkpoints", 2, d)
    assert tr.run(d, nproc=nproc) == 0, (d / "run.log").read_text()[-4000:]
    return d


def _assert_continues_like(tr, ref, resumed) -> None:
    want, got = tr.by_iteration(ref), tr.by_iteration(resumed)
    assert sorted(got) == [3, 4, 5]
    for i in (3, 4, 5):
        assert got[i]["consumed_samples"] == want[i]["consumed_samples"] == 8 * i
        assert got[i]["lr"] == pytest.approx(want[i]["lr"], rel=1e-12)
        assert abs(got[i]["lm_loss"] - want[i]["lm_loss"]) < LOSS_TOL, (i, got[i]["lm_loss"], want[i]["lm_loss"])
        assert got[i]["grad_norm"] == pytest.approx(want[i]["grad_norm"], rel=GRAD_NORM_RTOL)
    # The comparison can fail: training moved the loss by far more than the tolerance.
    assert abs(want[5]["lm_loss"] - want[2]["lm_loss"]) > 100 * LOSS_TOL


def _log(d) -> str:
    return (d / "run.log").read_text()


@pytest.fixture(scope="module")
def tp2_ref(tr, engine_root):
    return _reference(tr, engine_root, "tp2_ref", "parallel.tp=2")


@pytest.fixture(scope="module")
def dist_dp2_ref(tr, engine_root):
    """DP=2 distributed optimizer written in Megatron-LM's fully_reshardable layout."""
    return _reference(tr, engine_root, "dist_dp2_ref", "parallel.tp=1", "parallel.distributed_optimizer=true",
                      "train.checkpoint.fully_reshardable=true")


@pytest.fixture(scope="module")
def dist_dp_reshardable_ref(tr, engine_root):
    """DP=2 distributed optimizer written in the default layout, Megatron-LM's default: dp_reshardable."""
    return _reference(tr, engine_root, "dist_dprs_ref", "parallel.tp=1", "parallel.distributed_optimizer=true")


def test_tp2_checkpoint_resumes_at_tp1_dp2(tr, engine_root, tp2_ref):
    d = _resume(tr, engine_root, tp2_ref, "tp1_from_tp2", "parallel.tp=1")
    log = _log(d)
    assert "resharding tp=2 pp=1 cp=1 ep=1 dp=1 -> tp=1 pp=1 cp=1 ep=1 dp=2 (plain optimizer)" in log
    assert "RNG state not restored" in log  # tp changed: Megatron-LM drops it too
    _assert_continues_like(tr, tp2_ref, d)


def test_pp2_checkpoint_resumes_at_pp1_dp2(tr, engine_root):
    ref = _reference(tr, engine_root, "pp2_ref", "parallel.tp=1", "parallel.pp=2")
    d = _resume(tr, engine_root, ref, "pp1_from_pp2", "parallel.tp=1", "parallel.pp=1")
    assert "resharding tp=1 pp=2 cp=1 ep=1 dp=1 -> tp=1 pp=1 cp=1 ep=1 dp=2 (plain optimizer)" in _log(d)
    _assert_continues_like(tr, ref, d)


def test_dp2_distributed_optimizer_resumes_at_tp2_dp1(tr, engine_root, dist_dp2_ref):
    from mtk.launcher.ckpt_precheck import read_common_state

    common = read_common_state(dist_dp2_ref / "checkpoints" / "iter_0000002")
    # Recorded the way Megatron-LM records --dist-ckpt-optim-fully-reshardable, so it reads it the same way.
    assert common["content_metadata"]["distrib_optim_sharding_type"] == "fully_reshardable"
    assert common["args"].dist_ckpt_optim_fully_reshardable is True
    d = _resume(tr, engine_root, dist_dp2_ref, "dist_tp2_from_dp2", "parallel.tp=2",
                "parallel.distributed_optimizer=true", "train.checkpoint.fully_reshardable=true")
    assert "(distributed optimizer fully_reshardable)" in _log(d)
    _assert_continues_like(tr, dist_dp2_ref, d)


def test_dp_reshardable_checkpoint_resumes_at_dp1(tr, engine_root, dist_dp_reshardable_ref):
    """dp_reshardable reshards over data-parallel ranks: DP=2 → DP=1 (one rank) at the same tp/pp."""
    d = _resume(tr, engine_root, dist_dp_reshardable_ref, "dist_dp1_from_dprs", "parallel.tp=1",
                "parallel.distributed_optimizer=true", "cluster.procs_per_node=1", nproc=1)
    log = _log(d)
    assert "(distributed optimizer dp_reshardable)" in log and "RNG state restored" in log
    _assert_continues_like(tr, dist_dp_reshardable_ref, d)


def _entrypoint_train(tr, run_dir) -> subprocess.CompletedProcess:
    """The node's real train step (``mtk-entrypoint train``), which would exec torchrun after its checks."""
    cmd = [sys.executable, "-m", "mtk.launcher.entrypoint", "train", "--job", str(run_dir / "job.json"),
           "--run-dir", str(run_dir)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=tr.RUN_TIMEOUT, cwd=run_dir, env=tr.env(None))


def test_dp_reshardable_checkpoint_at_another_tp_is_refused_before_any_step(tr, engine_root, dist_dp_reshardable_ref):
    d = engine_root / "reshard_refused_tp2"
    tr.make_job(d, *BASE, "parallel.tp=2", "parallel.distributed_optimizer=true")
    tr.copy_checkpoint(dist_dp_reshardable_ref / "checkpoints", 2, d)

    # Through the node's entrypoint: refused from the common state, before torchrun starts any rank.
    out = _entrypoint_train(tr, d)
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    for words in ("parallel.tp", "dp_reshardable", "written at parallel.tp=1", "this job has parallel.tp=2",
                  "train.checkpoint.fully_reshardable=true", "train.init_from"):
        assert words in out.stderr, (words, out.stderr)
    assert "torch.distributed.run" not in out.stdout + out.stderr and not tr.records(d)

    # Ranks started directly (no entrypoint): each refuses before it loads, so no step runs.
    assert tr.run(d, tag="direct") != 0
    log = (d / "direct.log").read_text()
    assert " iteration " not in log and not tr.records(d)
    last = tr.last_exit(d)  # a refusal (exit 2) in one line per job, every rank refusing alike
    assert last["code"] == 2 and last["reason"].startswith("parallel.tp:") and "fully_reshardable" in last["reason"]
    assert log.count("[mtk] error: parallel.tp:") == 1, log[-3000:]  # rank 0's line (torchrun's report follows)


def test_changed_model_shape_is_refused_before_torchrun(tr, engine_root, tp2_ref):
    d = engine_root / "reshard_refused_layers"
    tr.make_job(d, *BASE, "parallel.tp=1", "model.num_layers=4")
    tr.copy_checkpoint(tp2_ref / "checkpoints", 2, d)
    out = _entrypoint_train(tr, d)
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "model.num_layers" in out.stderr and "num_layers=2" in out.stderr and "Traceback" not in out.stderr
    assert not tr.records(d)
