"""NVIDIA's H100-recipe settings that change numerics, in real CPU runs (torchrun, 1 rank, gloo, the tiny model):

* ``nan_on`` / ``nan_off``: a run driven to overflow (lr 1e30) — with the NaN check (the default) the first NaN
  gradient stops the run before it is reduced and applied, naming it; without, the run goes on logging NaN steps.
* ``decoupled``: the embedding/output layers train at ``decoupled_lr`` on the same schedule shape, down to
  ``decoupled_min_lr``, beside the other layers' ``lr``/``min_lr`` (bf16, with bf16 gradient buffers asked for
  explicitly: honoured on CPU too).
* ``plain`` / ``equivalent``: layernorm-1p, per-token loss (every token counts on mock data) and the fused cross
  entropy leave the losses of a run as they were — same numbers from the other weight parametrisation, loss
  normalisation and kernel — while each setting is in force (megatron-core's own torch norm refuses layernorm-1p:
  the run needs mtk's norm).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

BASE = ("cluster.procs_per_node=1", "parallel.tp=1", "train.precision=fp32", "train.checkpoint.save_interval=null",
        "train.checkpoint.save_on_exit=false", "train.eval_interval=null")


@pytest.fixture(scope="module")
def runs(tr, engine_root):
    jobs = {
        "nan_on": (*BASE, "train.iterations=4", "train.lr=1e30", "train.min_lr=0", "train.lr_warmup_iters=0"),
        "nan_off": (*BASE, "train.iterations=4", "train.lr=1e30", "train.min_lr=0", "train.lr_warmup_iters=0",
                    "train.check_nan_in_grad=false"),
        "decoupled": (*BASE, "train.iterations=6", "train.lr=1e-3", "train.min_lr=1e-4", "train.lr_warmup_iters=2",
                      "train.decoupled_lr=5e-3", "train.decoupled_min_lr=2e-4", "train.precision=bf16",
                      "train.grad_reduce_dtype=bf16"),
        "plain": (*BASE, "train.iterations=6"),
        "equivalent": (*BASE, "train.iterations=6", "model.layernorm_1p=true", "train.per_token_loss=true",
                       "train.cross_entropy_fusion=true"),
    }
    # One rank each and independent: all five run at once (one after another, a 2-core machine idles half the time).
    started = {}
    for name, sets in jobs.items():
        d = engine_root / f"recipe_{name}"
        tr.make_job(d, *sets)
        started[name] = (d, tr.start(d, nproc=1))
    return {name: (d, tr.finish(proc)) for name, (d, proc) in started.items()}


def test_nan_check_stops_the_run_at_the_first_nan_gradient(tr, runs):
    d, rc = runs["nan_on"]
    assert rc != 0
    last = tr.last_exit(d)
    assert "found NaN in local grad norm" in last["reason"] and "before data-parallel communication" in last["reason"]
    assert last["iteration"] < 4
    assert "NaN grad check: on" in (d / "run.log").read_text()


def test_without_the_nan_check_the_run_goes_on_through_nan_steps(tr, runs):
    d, rc = runs["nan_off"]
    assert rc == 0, (d / "run.log").read_text()[-3000:]
    recs = tr.records(d)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4]
    assert sum(r["nan"] for r in recs) >= 1


def test_decoupled_lr_gives_embedding_and_output_layers_their_own_schedule(tr, runs):
    d, rc = runs["decoupled"]
    assert rc == 0, (d / "run.log").read_text()[-3000:]
    recs = tr.records(d)
    assert len(recs) == 6
    for r in recs:
        # both groups follow one warmup + cosine shape c(t): lr = min + (max - min)·c, warmup scales from 0
        if r["iteration"] <= 2:
            assert r["decoupled_lr"] / r["lr"] == pytest.approx(5e-3 / 1e-3)
        else:
            c = (r["lr"] - 1e-4) / (1e-3 - 1e-4)
            assert r["decoupled_lr"] == pytest.approx(2e-4 + (5e-3 - 2e-4) * c)
    assert recs[-1]["lr"] == pytest.approx(1e-4) and recs[-1]["decoupled_lr"] == pytest.approx(2e-4)
    log = (d / "run.log").read_text()
    assert "decoupled learning rate: 5.000000E-03" in log
    assert "grad reduce: bf16" in log and all(r["lm_loss"] == r["lm_loss"] for r in recs)  # bf16 buffers, no NaN


def test_layernorm_1p_per_token_loss_and_fused_ce_keep_the_losses(tr, runs):
    (plain, rc_plain), (equiv, rc_equiv) = runs["plain"], runs["equivalent"]
    assert rc_plain == 0 and rc_equiv == 0, (equiv / "run.log").read_text()[-3000:]
    a = [r["lm_loss"] for r in tr.records(plain)]
    b = [r["lm_loss"] for r in tr.records(equiv)]
    assert len(a) == len(b) == 6 and a[-1] < a[0]
    assert b == pytest.approx(a, rel=1e-4)
    assert "fused: cross-entropy" in (equiv / "run.log").read_text()  # the run's plan line
