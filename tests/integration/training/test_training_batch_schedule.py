"""A growing global batch (train.batch_size_schedule, Megatron-LM's --step-batch-size-schedule) end to end on CPU:
torchrun, 2 ranks, gloo, data parallel 2, the tiny model on an indexed two-prefix blend.

The schedule is 2 sequences from sample 0, 4 from sample 8 (512 tokens ÷ seq 64) and 8 from sample 20: iterations
1-4 train 2, 5-7 train 4, 8-10 train 8 (44 samples). One run trains the 10 iterations, saving at 5 — inside the ramp;
a second run resumes from that checkpoint (a fresh folder holding only it) and must train iterations 6-10 exactly
as the first did: the same samples (the sampler is a function of the consumed samples the checkpoint records), the
same micro-batch counts, the same LR (the scheduler counts the samples). The records must show the batch each
iteration trained and the samples consumed after it, and the throughput of that batch. Megatron-LM's own
pretrain_gpt.py continuing such a run is the on-demand ``megatron_lm/test_pretrain_gpt_resumes_mtk.py``.
"""

from __future__ import annotations

import types

import pytest

from mtk.batch_schedule import BatchSchedule
from mtk.spec import load_job

pytestmark = pytest.mark.integration

AT, TOTAL = 5, 10
JOB = ("parallel.tp=1", "train.precision=fp32", "train.micro_batch_size=1",
       "train.batch_size_schedule=0:2 512:4 1280:8", f"train.iterations={TOTAL}", "train.lr_warmup_iters=2",
       "train.lr_decay_iters=8", f"train.checkpoint.save_interval={AT}")
BATCHES = {1: 2, 2: 2, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 8: 8, 9: 8, 10: 8}


def _blend(corpus) -> tuple[str, ...]:
    return (f"data.blend=[{{prefix: {corpus[0]}, weight: 0.7}}, {{prefix: {corpus[1]}, weight: 0.3}}]",
            "data.split='98,2,0'")


@pytest.fixture(scope="module")
def runs(tr, engine_root, indexed_corpus):
    ref = engine_root / "batch_schedule_ref"
    tr.make_job(ref, *JOB, *_blend(indexed_corpus))
    assert tr.run(ref) == 0, (ref / "run.log").read_text()[-4000:]
    resumed = engine_root / "batch_schedule_resumed"
    tr.copy_checkpoint(ref / "checkpoints", AT, resumed)
    tr.make_job(resumed, *JOB, *_blend(indexed_corpus))
    assert tr.run(resumed) == 0, (resumed / "run.log").read_text()[-4000:]
    return ref, resumed


def test_each_iteration_trains_the_schedules_batch_and_consumes_its_samples(tr, runs):
    ref, _ = runs
    recs = tr.by_iteration(ref)
    assert sorted(recs) == list(range(1, TOTAL + 1))
    assert {i: r["global_batch_size"] for i, r in recs.items()} == BATCHES
    consumed = 0
    for i in range(1, TOTAL + 1):
        consumed += BATCHES[i]
        assert recs[i]["consumed_samples"] == consumed, i
        # log_interval 1: each record's throughput is its own iteration's batch over its step time
        assert recs[i]["tokens_per_s"] * recs[i]["step_time_ms"] / 1e3 == pytest.approx(BATCHES[i] * 64), i
    job = load_job(ref / "job.json")
    assert BatchSchedule.of(job).samples(TOTAL) == consumed == 44
    log = (ref / "run.log").read_text()
    assert "global batch by schedule: 2 from sample 0, 4 from sample 8, 8 from sample 20; 10 iterations train 44 " \
           "samples" in log


def test_the_lr_follows_the_samples_each_iteration_consumed(tr, runs):
    """megatron-core's OptimizerParamScheduler stepped by each iteration's batch, with the warmup and decay in the
    samples of their iterations (2 → 4 samples, 8 → 28), as Megatron-LM's get_optimizer_param_scheduler builds it
    from --lr-warmup-samples / --lr-decay-samples."""
    from mtk.training import compat

    compat.install_import_stubs()
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    ref, _ = runs
    job = load_job(ref / "job.json")
    t = job.train
    opt = types.SimpleNamespace(param_groups=[{"lr": 0.0, "weight_decay": 0.0}])
    sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=t.lr, min_lr=t.min_lr, lr_warmup_steps=4,
                                    lr_decay_steps=28, lr_decay_style=t.lr_decay_style, start_wd=t.weight_decay,
                                    end_wd=t.weight_decay, wd_incr_steps=44, wd_incr_style="constant")
    recs = tr.by_iteration(ref)
    for i in range(1, TOTAL + 1):
        sched.step(increment=BATCHES[i])
        assert recs[i]["lr"] == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12), i


def test_a_resume_inside_the_ramp_continues_exactly(tr, runs):
    ref, resumed = runs
    log = (resumed / "run.log").read_text()
    assert f"at iteration {AT}, consumed samples 12" in log  # 4 × 2 + 1 × 4
    want, got = tr.by_iteration(ref), tr.by_iteration(resumed)
    assert sorted(got) == list(range(AT + 1, TOTAL + 1))
    for i in got:
        assert (got[i]["lm_loss"], got[i]["grad_norm"], got[i]["lr"], got[i]["consumed_samples"],
                got[i]["global_batch_size"]) == (want[i]["lm_loss"], want[i]["grad_norm"], want[i]["lr"],
                                                 want[i]["consumed_samples"], want[i]["global_batch_size"]), i


def test_the_checkpoint_records_the_schedule_for_megatron_lm(runs):
    from mtk.training.interop import megatron_lm
    from support.megatron_args_file import read_args_file

    ref, _ = runs
    argv = read_args_file((ref / "checkpoints" / f"iter_{AT:07d}" / megatron_lm.ARGS_FILE).read_text())
    assert argv[argv.index("--step-batch-size-schedule") + 1] == "0:2 512:4 1280:8"
    assert (argv[argv.index("--train-samples") + 1], argv[argv.index("--lr-decay-samples") + 1],
            argv[argv.index("--lr-warmup-samples") + 1]) == ("44", "28", "4")
    assert "--global-batch-size" not in argv and "--train-iters" not in argv
