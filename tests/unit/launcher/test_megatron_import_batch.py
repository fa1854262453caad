"""``mtk import`` of a global batch that grows: ``--rampup-batch-size START INCREMENT RAMP_SAMPLES`` (the GPT-3 scripts
of Megatron-LM ≤ core_r0.17) becomes the train.batch_size_schedule whose every iteration trains the batch the ramp
trained, its --train-samples the iterations Megatron-LM made of them; ``--step-batch-size-schedule`` (core_r0.19's
GPT-3 example) is taken as it is; the combinations Megatron-LM stops at, or counts in a unit mtk does not, are refused
by name. test_batch_schedule.py holds the conversion against megatron-core's own calculator."""

from __future__ import annotations

import pytest
from mtk.launcher.megatron_import import import_text

from mtk.batch_schedule import BatchSchedule, rampup_steps, rampup_train_iterations
from mtk.spec.loader import validate

MODEL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 2048 --max-position-embeddings 2048 " \
        "--micro-batch-size 1 --lr 6e-5 --mock-data --tokenizer-type NullTokenizer --vocab-size 1000"
# core_r0.17.0's examples/gpt3/train_gpt3_175b_distributed.sh counted in samples, as its ramp needs
GPT3 = f"torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py {MODEL} --global-batch-size 1536 " \
       "--rampup-batch-size 16 16 5859375 --train-samples 146484375 --lr-decay-samples 126953125 " \
       "--lr-warmup-samples 183105\n"


def _job(spec: dict):
    return validate({**spec, "cluster": {"nodes": 2, "procs_per_node": 8, "device": "gpu"}})


def test_a_rampup_becomes_the_schedule_of_the_ramp_and_its_samples_the_iterations_megatron_lm_made():
    result = import_text(GPT3)
    assert result.refused == [] and "--rampup-batch-size" in result.honoured
    train = result.spec["train"]
    want = rampup_steps(16, 16, 5859375, 1536)
    assert train["batch_size_schedule"] == [{"tokens": s * 2048, "global_batch_size": b} for s, b in want]
    job = _job(result.spec)
    schedule = BatchSchedule.of(job)
    assert schedule.steps == tuple(want) and job.train.global_batch_size == 1536
    # every iteration of the walk up the ramp trains the ramp's batch (the formula megatron-core ≤ 0.17 used)
    consumed, per_increment = 0, 5859375 / ((1536 - 16) // 16)
    while consumed <= 5859375 + 1536:
        ramp = 1536 if consumed > 5859375 else 16 + int(consumed / per_increment) * 16
        assert schedule.batch_at(consumed) == ramp, consumed
        consumed += ramp
    assert job.train.iterations == rampup_train_iterations(schedule, 5859375, 146484375)
    assert schedule.samples(job.train.iterations) <= 146484375 < schedule.samples(job.train.iterations + 1)
    # the LR horizons: the iterations whose samples come nearest, the difference noted
    for iterations, samples in ((job.train.lr_decay_iters, 126953125), (job.train.lr_warmup_iters, 183105)):
        assert abs(schedule.samples(iterations) - samples) <= schedule.batch_at(samples) / 2, samples
    notes = "\n".join(result.notes)
    assert "--rampup-batch-size 16 16 5859375: train.batch_size_schedule, 96 steps" in notes
    assert "megatron-core 0.18 on ignores the flag" in notes and "--lr-warmup-samples 183105 ends inside" in notes


@pytest.mark.parametrize(("extra", "flag", "words"), [
    ("--global-batch-size 64 --rampup-batch-size 16 16 1000 --train-iters 100", "--rampup-batch-size",
     "iteration-based training"),
    ("--global-batch-size 64 --rampup-batch-size 16 10 1000 --train-samples 9000", "--rampup-batch-size",
     "whole number of INCREMENT"),
    ("--global-batch-size 64 --rampup-batch-size 16 x 1000 --train-samples 9000", "--rampup-batch-size",
     "three whole numbers"),
    ("--global-batch-size 64 --rampup-batch-size 16 16 1000 --step-batch-size-schedule 0:16 --train-samples 9000",
     "--rampup-batch-size", "keep one of the two"),
    # core_r0.19.0's own GPT-3 example gives both: Megatron-LM's validate_args stops there
    ("--global-batch-size 1536 --step-batch-size-schedule '0:16 2.4B:320' --train-samples 9000",
     "--global-batch-size", "stops at the two together"),
    ("--step-batch-size-schedule '0:16 2.4B:320' --train-iters 500000", "--train-iters", "--train-samples instead"),
    ("--step-batch-size-schedule '0:16 2.4B:320' --train-samples 9000 --lr-decay-iters 400", "--lr-decay-iters",
     "--lr-decay-samples instead"),
])
def test_what_megatron_lm_stops_at_or_counts_otherwise_is_refused_by_name(extra, flag, words):
    result = import_text(f"python pretrain_gpt.py {MODEL} {extra} \n")
    refused = dict(result.refused)
    assert flag in refused and words in refused[flag], result.refused
    assert flag not in result.honoured


def test_a_step_schedule_is_taken_as_it_is_and_its_train_samples_counted_as_megatron_lm_counts_them():
    text = f"python pretrain_gpt.py {MODEL} --step-batch-size-schedule '0:16 2.4B:320 4.8B:624' " \
           "--train-samples 5000000 --lr-decay-samples 4000000 --lr-warmup-samples 0\n"
    result = import_text(text)
    assert result.refused == [] and "--step-batch-size-schedule" in result.honoured
    job = _job(result.spec)
    schedule = BatchSchedule.of(job)
    assert schedule.steps == ((0, 16), (2_400_000_000 // 2048, 320), (4_800_000_000 // 2048, 624))
    assert job.train.global_batch_size == 624  # the last step (Megatron-LM refuses --global-batch-size beside it)
    assert job.train.iterations == schedule.iterations(5_000_000)  # update_train_iters: test_batch_schedule.py
    assert job.train.lr_warmup_iters == 0
