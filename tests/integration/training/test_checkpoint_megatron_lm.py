"""mtk checkpoints are Megatron-LM checkpoints: Megatron-LM's own loader resumes them with no override flags.

Each case trains the tiny model with mtk (torchrun, 2 CPU ranks, gloo), then resumes its mid-run checkpoint
through ``megatron.training.checkpointing.load_checkpoint`` (Megatron-LM's code from the megatron-core wheel,
run by ``megatron_lm/mlm_load_and_continue.py``) and continues with mtk's loop: the losses must equal the
uninterrupted mtk run's, which holds only if Megatron-LM restored weights, optimizer moments, scheduler,
RNG streams and the data position (``args.consumed_train_samples``). Cases: plain TP=2 fp32, distributed
optimizer DP=2 bf16, MoE (4 experts top-2) EP=2 fp32.

The same with Megatron-LM's whole ``pretrain_gpt.py`` (its training loop, not mtk's) is the on-demand
``megatron_lm/test_pretrain_gpt_resumes_mtk.py`` (needs a Megatron-LM tree; ``make test-megatron-lm``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import megatron_lm_run as mlm

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "megatron_lm" / "mlm_load_and_continue.py"
TOTAL, AT = 8, 4
CASES = mlm.MTK_RUNS


def _run_mlm(tr, run_dir: Path, load: Path) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SCRIPT),
           "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir), "--load", str(load)]
    with open(run_dir / "mlm.log", "w") as log:
        proc = subprocess.run(cmd, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT, timeout=900,
                              env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    return proc.returncode


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tr, engine_root):
    name = request.param
    job = (*CASES[name], f"train.iterations={TOTAL}", "train.lr_warmup_iters=2",
           f"train.checkpoint.save_interval={AT}")
    ref = engine_root / f"mlm_{name}_ref"
    tr.make_job(ref, *job)
    assert tr.finish(tr.start(ref), timeout=900) == 0, (ref / "run.log").read_text()[-3000:]
    mlm = engine_root / f"mlm_{name}_resume"
    ckpt = tr.copy_checkpoint(ref / "checkpoints", AT, mlm)
    tr.make_job(mlm, *job, "train.checkpoint.load=false", "train.checkpoint.save_on_exit=false",
                f"train.checkpoint.dir={mlm / 'unused'}")
    rc = _run_mlm(tr, mlm, ckpt)
    return name, ref, mlm, rc


def test_megatron_lm_loader_resumes_mtk_checkpoint_and_losses_continue(tr, case):
    name, ref, mlm, rc = case
    log = (mlm / "mlm.log").read_text()
    assert rc == 0, log[-4000:]
    loaded = json.loads((mlm / "mlm_load.json").read_text())
    assert loaded["iteration"] == AT
    assert loaded["consumed_train_samples"] == AT * 8  # tiny.yaml: global batch 8
    assert loaded["flops"] > 0
    assert "could not find arguments in the checkpoint" not in log
    assert "RNG state will be ignored" not in log
    assert "successfully loaded checkpoint" in log
    if "distopt" in name:
        assert "'distrib_optim_sharding_type': 'dp_reshardable'" in log
    want = {i: r["lm_loss"] for i, r in tr.by_iteration(ref).items() if i > AT}
    got = {i: r["lm_loss"] for i, r in tr.by_iteration(mlm).items()}
    assert sorted(got) == list(range(AT + 1, TOTAL + 1))
    assert got == pytest.approx(want, rel=0, abs=1e-6), (got, want)
