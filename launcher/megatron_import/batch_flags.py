"""The flags of a global batch that changes during training: ``--step-batch-size-schedule`` (taken as it is, into
``train.batch_size_schedule``), the sample counts (``--train-samples``, ``--lr-warmup-samples``,
``--lr-decay-samples``) in the iterations of that schedule as Megatron-LM counts them, and
``--rampup-batch-size START INCREMENT RAMP_SAMPLES``: refused, because what it trains depends on the Megatron-LM
version — megatron-core ≤ 0.17 ramps, 0.18 on parses it and trains ``--global-batch-size`` throughout — and the
script does not say which; the refusal gives the exact ``--step-batch-size-schedule`` of the ramp and the way to
keep the constant batch."""

from __future__ import annotations

import re
from typing import Any

from mtk.batch_schedule import BatchSchedule, megatron_text, parse_steps, rampup_steps

RAMPUP = "--rampup-batch-size"
STEP = "--step-batch-size-schedule"


def read_rampup(values: list[str], given: dict, out: Any) -> None:
    """Recorded for :func:`apply_rampup` (it needs the global batch and the sequence length)."""
    if len(values) != 3 or not all(re.fullmatch(r"[0-9]+", v) for v in values):
        out.honoured.remove(RAMPUP)
        out.refused.append((RAMPUP, f"expects three whole numbers START INCREMENT RAMP_SAMPLES, got "
                                    f"{' '.join(values)!r} (Megatron-LM would stop)"))
        return
    given["rampup"] = tuple(int(v) for v in values)


def apply_rampup(given: dict, out: Any, get_field) -> None:
    """--rampup-batch-size, refused with both of its readings: never a guess at the Megatron-LM version."""
    if "rampup" not in given:
        return
    start, increment, ramp = given["rampup"]
    del given["rampup"]
    out.honoured.remove(RAMPUP)
    gbs, seq = get_field(out.spec, "train.global_batch_size"), get_field(out.spec, "model.seq_length")
    if STEP in given:
        out.refused.append((RAMPUP, f"given with {STEP}: keep one of the two"))
        return
    why = ("megatron-core 0.18 on parses it and trains --global-batch-size throughout (a deprecation warning), "
           "megatron-core ≤ 0.17 ramps the batch; the script does not say which Megatron-LM runs it, so mtk does "
           f"not guess. The constant batch: --allow-dropped {RAMPUP}")
    if gbs and seq:
        try:
            steps = rampup_steps(start, increment, ramp, gbs)
        except ValueError as e:
            why += f" (the ramp itself would not run: {e})"
        else:
            schedule = megatron_text([(samples * seq, batch) for samples, batch in steps])
            why += (f". The ramp, the same batch at every sample: replace --global-batch-size {gbs} and {RAMPUP} with "
                    f"{STEP} '{schedule}'")
    out.refused.append((RAMPUP, why))


def schedule_of(spec: dict, get_field) -> BatchSchedule | None:
    """The spec's batch-size schedule in samples, or None (none, or not readable: validation says why)."""
    steps, seq = get_field(spec, "train.batch_size_schedule"), get_field(spec, "model.seq_length")
    if not steps or not seq:
        return None
    try:
        pairs = parse_steps(steps) if isinstance(steps, str) else [(s["tokens"], s["global_batch_size"])
                                                                   for s in steps]
    except (ValueError, KeyError, TypeError):
        return None
    pairs.sort()
    if pairs[0][0] // seq != 0:
        return None
    return BatchSchedule(tuple((tokens // seq, batch) for tokens, batch in pairs))


def iterations_of(flag: str, samples: int, schedule: BatchSchedule, given: dict, out: Any) -> int:
    """``samples`` in the iterations of ``schedule``: --train-samples as Megatron-LM's update_train_iters counts
    it; an LR horizon as the iterations whose samples come nearest (noted where they are not exact)."""
    if flag == "--train-samples":
        iterations = schedule.iterations(samples)
        out.notes.append(f"{flag} {samples}: {iterations} iterations under the batch-size schedule "
                         f"({schedule.samples(iterations)} samples), as Megatron-LM counts them")
        return iterations
    iterations = round(schedule.span(samples))
    exact = schedule.samples(iterations)
    if exact != samples:
        out.notes.append(f"{flag} {samples} ends inside an iteration of the batch-size schedule: read as "
                         f"{iterations} iterations ({exact} samples; the learning rate differs by that much)")
    else:
        out.notes.append(f"{flag} {samples}: the first {iterations} iterations of the batch-size schedule")
    return iterations


ITERATION_FLAGS = ("--train-iters", "--lr-decay-iters", "--lr-warmup-iters")


def refuse_iterations(given: dict, out: Any, spec: dict, get_field) -> None:
    """Iteration counts beside a batch-size schedule: Megatron-LM then counts the LR schedule in iterations × the
    --global-batch-size it records (micro batch × data parallel beside a schedule) while it steps it by each
    iteration's batch; mtk counts it in the samples those iterations consume, so such a flag is refused."""
    if not get_field(spec, "train.batch_size_schedule") or STEP not in given:
        return
    for flag in ITERATION_FLAGS:
        value = given.get(flag)
        if value is None or (flag == "--lr-warmup-iters" and value == "0") or flag not in out.honoured:
            continue
        out.honoured.remove(flag)
        out.refused.append((flag, f"given with {STEP}: Megatron-LM then counts the learning-rate schedule in "
                                  "iterations × micro batch × data parallel while each iteration steps it by its own "
                                  "batch; mtk counts it in the samples the iterations consume — give "
                                  f"{flag.replace('-iters', '-samples')} instead"))
