"""``mtk import`` of a global batch that grows: ``--rampup-batch-size START INCREMENT RAMP_SAMPLES`` (the GPT-3 scripts
of Megatron-LM ≤ core_r0.17; 0.18 on ignores it) is refused with both readings and the exact schedule of the ramp;
``--step-batch-size-schedule`` (core_r0.19's
GPT-3 example) is taken as it is; the combinations Megatron-LM stops at, or counts in a unit mtk does not, are refused
by name. test_batch_schedule.py holds the conversion against megatron-core's own calculator."""

from __future__ import annotations

import pytest
from mtk.launcher.megatron_import import import_text

from mtk.batch_schedule import BatchSchedule, rampup_steps
from mtk.spec.loader import validate

MODEL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 2048 --max-position-embeddings 2048 " \
        "--micro-batch-size 1 --lr 6e-5 --mock-data --tokenizer-type NullTokenizer --vocab-size 1000"
# core_r0.17.0's examples/gpt3/train_gpt3_175b_distributed.sh counted in samples, as its ramp needs
GPT3 = f"torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py {MODEL} --global-batch-size 1536 " \
       "--rampup-batch-size 16 16 5859375 --train-samples 146484375 --lr-decay-samples 126953125 " \
       "--lr-warmup-samples 183105\n"


def _job(spec: dict):
    return validate({**spec, "cluster": {"nodes": 2, "procs_per_node": 8, "device": "gpu"}})


def test_a_rampup_is_refused_with_both_readings_and_each_way_out_imports_what_it_says():
    """megatron-core ≤ 0.17 ramps, 0.18 on trains --global-batch-size throughout: the refusal names both, and each
    way out it gives imports to the batch it promises — the schedule it prints trains the ramp's batch at every
    sample count (the formula megatron-core ≤ 0.17 used), --allow-dropped the constant batch."""
    result = import_text(GPT3)
    why = dict(result.refused)["--rampup-batch-size"]
    assert "megatron-core 0.18 on parses it and trains --global-batch-size throughout" in why
    assert "≤ 0.17 ramps" in why and "--allow-dropped --rampup-batch-size" in why
    assert "--rampup-batch-size" not in result.honoured and "batch_size_schedule" not in result.spec.get("train", {})
    schedule_text = why.split("--step-batch-size-schedule '", 1)[1].rstrip("'")
    ramp = import_text(GPT3.replace("--global-batch-size 1536 --rampup-batch-size 16 16 5859375",
                                    f"--step-batch-size-schedule '{schedule_text}'"))
    assert ramp.refused == [], ramp.refused
    schedule = BatchSchedule.of(_job(ramp.spec))
    assert schedule.steps == tuple(rampup_steps(16, 16, 5859375, 1536)) and len(schedule.steps) == 96
    consumed, per_increment = 0, 5859375 / ((1536 - 16) // 16)
    while consumed <= 5859375 + 1536:
        want = 1536 if consumed > 5859375 else 16 + int(consumed / per_increment) * 16
        assert schedule.batch_at(consumed) == want, consumed
        consumed += want
    from mtk.launcher.megatron_import.verdict import judge

    dropped = judge(GPT3, "gpt3.sh", allow={"--rampup-batch-size"})
    job = _job(dropped.imported.spec)
    assert job.train.batch_size_schedule is None and job.train.global_batch_size == 1536
    assert job.train.iterations == 146484375 // 1536  # --train-samples ÷ the constant batch, as 0.18 on counts


@pytest.mark.parametrize(("extra", "flag", "words"), [
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
