"""train.batch_size_schedule against megatron-core's own StepBatchsizeNumMicroBatchesCalculator and Megatron-LM's own
update_train_iters / get_optimizer_param_scheduler: the global batch and micro-batch count of every iteration, the
samples a number of iterations consumes, the iterations Megatron-LM makes of --train-samples, the thresholds it parses
from the string, and the LR horizons mtk's engine gives the scheduler. The engine asks megatron-core's calculator
itself each iteration (training/optim.py's batch_calculator); mtk.batch_schedule is what plans without it (the
schedule's samples for the LR horizons, the dataset size, the checks, ``mtk validate``)."""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtk import megatron_flags
from mtk.batch_schedule import BatchSchedule, parse_steps
from mtk.spec.loader import validate

SCHEDULES = {  # (string, seq_length, micro batch, data parallel)
    "gpt3_175b_example": ("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048, 1, 16),
    "release_15b": ("0:384 200B:768 400B:1152", 4096, 2, 64),
    "thresholds_inside_an_iteration": ("0:8 100:16, 1000:24 2500:32", 64, 2, 2),  # commas, tokens off a sequence
    "unsorted_with_suffixes": ("3.2K:40 0:8 1k:24", 32, 4, 2),
}


def _core():
    from mtk.training import compat

    compat.install()
    from megatron.core import num_microbatches_calculator as calc

    return calc


def _job(text: str, seq: int, mbs: int, dp: int, **train):
    return validate({"name": "t", "model": {"preset": "tiny", "seq_length": seq, "max_position_embeddings": seq},
                     "cluster": {"nodes": 1, "procs_per_node": dp, "device": "cpu"},
                     "train": {"micro_batch_size": mbs, "batch_size_schedule": text, **train}})


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_iteration_trains_the_batch_megatron_cores_calculator_gives(name):
    """Walked iteration by iteration as Megatron-LM's train loop walks it (update at the samples consumed, train
    the batch, consume it): mtk's batch, micro-batch count and samples agree with the calculator's at each one."""
    text, seq, mbs, dp = SCHEDULES[name]
    calc = _core()
    job = _job(text, seq, mbs, dp, iterations=5)
    ours = BatchSchedule.of(job)
    theirs = calc.StepBatchsizeNumMicroBatchesCalculator(**megatron_flags.core_kwargs(job, megatron_flags.CALCULATOR),
                                                         data_parallel_size=dp, decrease_batch_size_if_needed=False,
                                                         rank=1)
    assert list(ours.steps) == theirs.schedule  # the thresholds, in samples, as megatron-core parsed the string
    consumed, changes = 0, 0
    last = None
    for iteration in range(1, 400_000):
        theirs.update(consumed, consistency_check=True)
        batch = theirs.get_current_global_batch_size()
        assert (ours.batch_at(consumed), batch // (mbs * dp)) == (batch, theirs.get())
        changes += batch != last
        last = batch
        consumed += batch
        if iteration % 997 == 0 or batch == job.train.global_batch_size:
            assert ours.samples(iteration) == consumed, iteration
        if batch == job.train.global_batch_size and changes == len(ours.steps):
            break
    assert changes == len(ours.steps) and last == job.train.global_batch_size  # the walk reached the last step
    assert ours.samples(iteration + 10) == consumed + 10 * last


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_the_iterations_of_train_samples_are_megatron_lms(name):
    """Megatron-LM's update_train_iters (--train-samples with a schedule) against BatchSchedule.iterations, at
    thresholds, one either side and far past the last; and the samples of N iterations train N iterations there."""
    from mtk.training import compat

    compat.install()
    import typing

    if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
        typing.override = lambda f: f  # type: ignore[attr-defined]
    from megatron.core import num_microbatches_calculator as calc
    from megatron.training.training import update_train_iters

    text, seq, mbs, dp = SCHEDULES[name]
    job = _job(text, seq, mbs, dp)
    ours = BatchSchedule.of(job)
    calc.destroy_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(rank=1, global_batch_size=None, micro_batch_size=mbs,
                                          data_parallel_size=dp, step_batch_size_schedule=text, seq_length=seq)
    try:
        targets = {0, 1, ours.samples(7), ours.samples(7) + 1}
        for threshold, batch in ours.steps:
            targets |= {threshold, threshold + 1, max(threshold - 1, 0), threshold + 5 * batch}
        for samples in sorted(targets):
            args = types.SimpleNamespace(train_iters=None, train_samples=samples, step_batch_size_schedule=text,
                                         global_batch_size=mbs * dp)
            if samples == 0:
                continue  # Megatron-LM reads --train-samples 0 as "not given"
            update_train_iters(args)
            assert ours.iterations(samples) == args.train_iters, samples
        for n in (1, 3, 50, 1000):
            args = types.SimpleNamespace(train_iters=None, train_samples=ours.samples(n),
                                         step_batch_size_schedule=text, global_batch_size=mbs * dp)
            update_train_iters(args)
            assert args.train_iters == n
    finally:
        calc.destroy_num_microbatches_calculator()


@given(steps=st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 12)), min_size=1, max_size=6,
                     unique_by=lambda s: s[0]), n=st.integers(0, 3_000))
@settings(max_examples=300, deadline=None)
def test_samples_iterations_and_span_agree_with_a_walk(steps, n):
    """The closed forms against walking the iterations one by one (Megatron-LM's own rule: the batch of an
    iteration is the step reached by the samples consumed before it)."""
    schedule = BatchSchedule(tuple(sorted({(0, steps[0][1]), *((t, b) for t, b in steps[1:] if t)})))
    consumed, walk = 0, [0]
    for _ in range(n):
        consumed += schedule.batch_at(consumed)
        walk.append(consumed)
    assert schedule.samples(n) == walk[n]
    assert schedule.iterations(walk[n]) == n
    if n:
        assert schedule.iterations(walk[n] - 1) == n if walk[n] - 1 > walk[n - 1] else n - 1
        assert schedule.span(walk[n - 1] + 0.5) == pytest.approx(n - 1 + 0.5 / (walk[n] - walk[n - 1]))
    assert schedule.span(walk[n]) == pytest.approx(n)


def test_the_string_parses_as_megatron_cores_parser():
    calc = _core()
    for text, seq, _mbs, _dp in SCHEDULES.values():
        theirs = calc.StepBatchsizeNumMicroBatchesCalculator._parse_schedule(text, None)
        assert parse_steps(text) == theirs
        job = _job(text, seq, 1, 1)
        assert [(s.tokens, s.global_batch_size) for s in job.train.batch_size_schedule] == theirs
    with pytest.raises(ValueError, match="not TOKENS:GLOBAL_BATCH"):
        parse_steps("0:8 16")


def test_the_lr_horizons_are_megatron_lms_samples():
    """The engine's scheduler counts the samples the iterations consume: --train-samples, --lr-decay-samples and
    --lr-warmup-samples (or the fraction of the decay samples) as Megatron-LM's get_optimizer_param_scheduler takes
    them from the args file (tests/unit/training/test_megatron_lm_args_file.py holds the file against it)."""
    text, seq, mbs, dp = SCHEDULES["thresholds_inside_an_iteration"]
    job = _job(text, seq, mbs, dp, iterations=40, lr_decay_iters=30, lr_warmup_iters=3)
    ours = BatchSchedule.of(job)
    kw = megatron_flags.core_kwargs(job, megatron_flags.SCHEDULER)
    # thresholds at samples 0, 1, 15, 39: iterations train 8 (from 0), 16 (from 8), 24 (from 24), ...
    assert ours.samples(3) == 8 + 16 + 24
    assert (kw["lr_warmup_steps"], kw["lr_decay_steps"], kw["wd_incr_steps"]) == \
        (ours.samples(3), ours.samples(30), ours.samples(40))
    frac = _job(text, seq, mbs, dp, iterations=40, lr_warmup_fraction=0.1)
    assert megatron_flags.core_kwargs(frac, megatron_flags.SCHEDULER)["lr_warmup_steps"] == \
        pytest.approx(0.1 * ours.samples(40))
    args = megatron_flags.args_values(job)
    assert (args["train_iters"], args["train_samples"], args["lr_decay_iters"], args["lr_decay_samples"],
            args["lr_warmup_iters"], args["lr_warmup_samples"]) == (40, ours.samples(40), None, ours.samples(30), 0,
                                                                    ours.samples(3))
    assert args["step_batch_size_schedule"] == "0:8 100:16 1000:24 2500:32"
    assert args["global_batch_size"] == mbs * dp  # Megatron-LM's own default beside a schedule
    constant = validate({"name": "t", "model": {"preset": "tiny"}, "train": {"global_batch_size": 8}})
    plain = megatron_flags.args_values(constant)
    assert (plain["train_samples"], plain["lr_decay_samples"], plain["lr_warmup_samples"],
            plain["step_batch_size_schedule"], plain["global_batch_size"]) == (None, None, 0, None, 8)


def test_a_resumed_schedule_is_recorded_in_samples():
    """record_schedule under a batch-size schedule: the scheduler's samples go to the -samples fields, the
    -iters fields keep Megatron-LM's sample-based values (None, 0)."""
    text, seq, mbs, dp = SCHEDULES["thresholds_inside_an_iteration"]
    job = _job(text, seq, mbs, dp, iterations=40, lr_warmup_iters=3)
    args = types.SimpleNamespace(**megatron_flags.args_values(job))
    scheduler = types.SimpleNamespace(max_lr=1e-3, min_lr=1e-5, lr_decay_style="linear", lr_warmup_steps=40,
                                      lr_decay_steps=900)
    megatron_flags.record_schedule(args, scheduler, job.train.global_batch_size)
    assert (args.lr_warmup_samples, args.lr_decay_samples, args.lr_warmup_iters, args.lr_decay_iters) == \
        (40, 900, 0, None)


@pytest.mark.parametrize(("sets", "field", "words"), [
    ({"batch_size_schedule": "0:16 2.4B:32", "global_batch_size": 8}, "train.global_batch_size", "last step"),
    ({"batch_size_schedule": "100:16 200:32"}, "train.batch_size_schedule", "must start at 0"),
    ({"batch_size_schedule": "0:16 64:32 100:48"}, "train.batch_size_schedule", "same sample"),
    ({"batch_size_schedule": "0:32 640:16"}, "train.batch_size_schedule", "shrinks"),
    ({"batch_size_schedule": "0:12 640:16", "micro_batch_size": 4}, "train.batch_size_schedule", "12"),
    ({"batch_size_schedule": "0:16 x:32"}, "train.batch_size_schedule", "not a number"),
])
def test_a_schedule_megatron_lm_would_refuse_is_refused_naming_the_field(sets, field, words):
    from mtk.spec.errors import SpecError

    with pytest.raises(SpecError) as err:
        validate({"name": "t", "model": {"preset": "tiny"}, "cluster": {"nodes": 1, "procs_per_node": 2},
                  "train": sets})
    line = next(line for line in str(err.value).splitlines() if field in line)
    assert words in line, str(err.value)


def test_the_final_batch_is_the_schedules_last():
    job = validate({"name": "t", "model": {"preset": "tiny"}, "train": {"batch_size_schedule": [
        {"tokens": 6400, "global_batch_size": 32}, {"tokens": 0, "global_batch_size": 16}]}})
    assert job.train.global_batch_size == 32
    assert [s.tokens for s in job.train.batch_size_schedule] == [0, 6400]


# --rampup-batch-size START INCREMENT RAMP_SAMPLES (global batch), as the official GPT-3 scripts give it
RAMPS = {"gpt3_175b": (32, 32, 2_000_000, 1536), "uneven_float_steps": (16, 8, 300_007, 1024),
         "several_steps_a_sample": (2, 2, 3, 12), "one_step": (8, 8, 1000, 16)}


def _ramp_batch(start: int, increment: int, ramp: int, gbs: int, consumed: int) -> int:
    """The ramp megatron-core ≤ 0.17 trains (its RampupBatchsizeNumMicroBatchesCalculator.update, which megatron-core
    0.18 removed): START plus INCREMENT per RAMP_SAMPLES / ((global − START) / INCREMENT) samples, a float
    division, until RAMP_SAMPLES are passed."""
    if consumed > ramp:
        return gbs
    return start + int(consumed / (ramp / ((gbs - start) // increment))) * increment


@pytest.mark.parametrize("name", sorted(RAMPS))
def test_a_rampup_converts_to_the_schedule_megatron_core_trains_it_by(name):
    """Every sample count up to past the ramp, and every iteration of a walk: the ramp's batch equals the batch
    megatron-core 0.19's StepBatchsizeNumMicroBatchesCalculator gives for the converted steps, written as the
    --step-batch-size-schedule string an mtk run hands it (thresholds in tokens, with --seq-length)."""
    from mtk.batch_schedule import megatron_text, rampup_steps

    start, increment, ramp, gbs = RAMPS[name]
    seq = 2048
    steps = rampup_steps(start, increment, ramp, gbs)
    calc = _core().StepBatchsizeNumMicroBatchesCalculator(
        micro_batch_size=1, data_parallel_size=1, decrease_batch_size_if_needed=False, rank=1,
        schedule=megatron_text([(samples * seq, batch) for samples, batch in steps]), seq_length=seq)
    probes = range(ramp + 3) if ramp < 400_000 else \
        sorted({c + d for c, _ in steps for d in (-1, 0, 1) if c + d >= 0} | set(range(0, ramp + 3, 997)))
    for consumed in probes:
        calc.update(consumed, consistency_check=False)
        assert calc.get_current_global_batch_size() == _ramp_batch(start, increment, ramp, gbs, consumed), consumed
    consumed = 0
    while consumed <= ramp + gbs:
        calc.update(consumed, consistency_check=False)
        batch = calc.get_current_global_batch_size()
        assert batch == _ramp_batch(start, increment, ramp, gbs, consumed)
        consumed += batch
    assert steps[-1][1] == gbs and steps[0] == (0, start)


@pytest.mark.parametrize(("ramp", "words"), [
    ((0, 8, 100, 64), "must be positive"), ((8, 0, 100, 64), "must be positive"),
    ((16, 8, 100, 60), "whole number of INCREMENT"), ((64, 8, 100, 32), "whole number of INCREMENT"),
    ((64, 8, 100, 64), "divides by zero"), ((8, 8, 0, 64), "divides by zero"), ((1, 1, 10**6, 10**6), "steps"),
])
def test_a_rampup_megatron_lm_stops_at_is_refused_with_why(ramp, words):
    from mtk.batch_schedule import rampup_steps

    with pytest.raises(ValueError, match=words):
        rampup_steps(*ramp)
