"""The global batch each iteration trains: constant (``train.global_batch_size``) or stepped by the samples consumed
(``train.batch_size_schedule``, Megatron-LM's ``--step-batch-size-schedule``).

A schedule is Megatron-LM's: steps of (tokens, global batch); from ``tokens // model.seq_length`` samples consumed
on, each iteration trains that step's batch (megatron-core 0.19's ``StepBatchsizeNumMicroBatchesCalculator``, which
Megatron-LM's ``set_global_variables`` hands ``args.seq_length``, so its thresholds are tokens). The batch of an
iteration is the one at the samples consumed *before* it, so an iteration that crosses a threshold still trains
the old batch. :class:`BatchSchedule` answers, without walking every iteration: the batch at a sample count, the
samples ``n`` iterations consume (``samples``: what Megatron-LM's LR schedule and ``--train-samples`` count), and
the iterations Megatron-LM's ``update_train_iters`` makes of a sample count (``iterations``). Plain data: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Megatron-LM's threshold suffixes (StepBatchsizeNumMicroBatchesCalculator._parse_numeric_value)
SUFFIXES = {"T": 10**12, "B": 10**9, "M": 10**6, "K": 10**3}
# Megatron-LM reads a threshold through float(): integers beyond 2**53 do not survive it
EXACT_TOKENS = 2**53


def parse_number(text: str) -> int:
    """A threshold or batch size as Megatron-LM reads it: ``int(float(number) × suffix)`` (``2.4B``, ``384``)."""
    word = text.strip().upper()
    multiplier = SUFFIXES.get(word[-1:], 1)
    if multiplier != 1:
        word = word[:-1]
    try:
        return int(float(word) * multiplier)
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not a number (write e.g. 384, 2.4B or 1.5T)") from None


def parse_steps(text: str) -> list[tuple[int, int]]:
    """``"0:384 200B:768"`` (spaces or commas between steps) → [(tokens, batch), ...] sorted by tokens, as
    Megatron-LM's parser reads it."""
    steps = []
    for entry in text.strip().replace(",", " ").split():
        if ":" not in entry:
            raise ValueError(f"step {entry!r} is not TOKENS:GLOBAL_BATCH (e.g. '0:384 200B:768')")
        tokens, batch = entry.split(":", 1)
        steps.append((parse_number(tokens), parse_number(batch)))
    if not steps:
        raise ValueError("no steps: write TOKENS:GLOBAL_BATCH pairs, e.g. '0:384 200B:768'")
    return sorted(steps, key=lambda s: s[0])


def megatron_text(steps: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    """Steps of (tokens, batch) as Megatron-LM's flag value: whole numbers, which its parser reads back exactly."""
    return " ".join(f"{tokens}:{batch}" for tokens, batch in steps)


@dataclass(frozen=True)
class BatchSchedule:
    """``steps``: (samples consumed from which it applies, global batch), the first at 0, thresholds increasing."""

    steps: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, job: Any) -> BatchSchedule:
        """The job's schedule in samples (thresholds ``tokens // model.seq_length``); one step for a constant batch."""
        steps = job.train.batch_size_schedule
        if not steps:
            return cls(((0, job.train.global_batch_size),))
        return cls(tuple((s.tokens // job.model.seq_length, s.global_batch_size) for s in steps))

    @property
    def constant(self) -> bool:
        return len(self.steps) == 1

    @property
    def largest(self) -> int:
        return max(batch for _, batch in self.steps)

    def batch_at(self, consumed: int) -> int:
        """The global batch of the iteration that starts after ``consumed`` samples."""
        batch = self.steps[0][1]
        for threshold, size in self.steps:
            if consumed < threshold:
                break
            batch = size
        return batch

    def _segments(self):
        """(threshold, batch, next threshold or None) per step."""
        nexts = [t for t, _ in self.steps[1:]] + [None]
        return [(t, b, n) for (t, b), n in zip(self.steps, nexts, strict=True)]

    def samples(self, iterations: int) -> int:
        """Samples consumed by the first ``iterations`` iterations."""
        consumed, left = 0, iterations
        for _threshold, batch, nxt in self._segments():
            if nxt is not None and consumed >= nxt:
                continue  # passed this step inside an earlier iteration
            run = left if nxt is None else min(left, -(-(nxt - consumed) // batch))
            consumed += run * batch
            left -= run
            if not left:
                break
        return consumed

    def iterations(self, samples: int) -> int:
        """Megatron-LM's ``update_train_iters``: the iterations it trains for ``--train-samples samples`` (the
        fewest whose samples reach it; the last may pass it)."""
        consumed, done = 0, 0
        for _threshold, batch, nxt in self._segments():
            if consumed >= samples:
                break
            if nxt is not None and consumed >= nxt:
                continue
            end = samples if nxt is None else min(samples, nxt)
            run = -(-(end - consumed) // batch)
            consumed += run * batch
            done += run
        return done

    def span(self, samples: float) -> float:
        """``samples`` in iterations, fractional within an iteration (describes an LR horizon in the spec's unit)."""
        whole = self.iterations(math.floor(samples) + 1) - 1  # the iterations whose samples stay within it
        start = self.samples(whole)
        return whole + (samples - start) / self.batch_at(start)

    def describe(self, iterations: int, seq_length: int) -> str:
        """One line for ``mtk validate`` and the run's log: each step, and what the run's iterations consume."""
        steps = ", ".join(f"{batch} from sample {start:,}" for start, batch in self.steps)
        samples = self.samples(iterations)
        return (f"global batch by schedule: {steps}; {iterations:,} iterations train {samples:,} samples "
                f"({samples * seq_length:,} tokens)")


# a ramp with more steps than this is refused (each step is a line of the spec)
MAX_RAMP_STEPS = 10_000


def rampup_steps(start: int, increment: int, ramp_samples: int, global_batch: int) -> list[tuple[int, int]]:
    """Megatron-LM's ``--rampup-batch-size START INCREMENT RAMP_SAMPLES`` (megatron-core ≤ 0.17's
    ``RampupBatchsizeNumMicroBatchesCalculator``) as steps of (samples consumed, global batch), exactly.

    That calculator trains ``start + int(consumed / per_increment) × increment`` while ``consumed ≤ RAMP_SAMPLES``
    (``per_increment = RAMP_SAMPLES / ((global − start) / increment)``, a float), then ``global``. Each step's
    threshold is the smallest whole sample count at which that float expression reaches it, found with the same
    float arithmetic, so a schedule of these steps gives the same batch at every sample count. Raises ValueError
    with Megatron-LM's reason where its calculator stops."""
    if start <= 0 or increment <= 0 or ramp_samples < 0:
        raise ValueError(f"START {start}, INCREMENT {increment} and RAMP_SAMPLES {ramp_samples} must be positive "
                         "(Megatron-LM's calculator stops otherwise)")
    if global_batch < start or (global_batch - start) % increment:
        raise ValueError(f"the global batch {global_batch} must be START {start} plus a whole number of INCREMENTs "
                         f"{increment} (Megatron-LM's calculator stops otherwise)")
    increments = (global_batch - start) // increment
    if not increments or not ramp_samples:
        raise ValueError("START equal to the global batch, or 0 RAMP_SAMPLES: Megatron-LM's calculator divides by "
                         "zero; leave the flag out for a constant batch")
    if increments > MAX_RAMP_STEPS:
        raise ValueError(f"{increments:,} steps (more than {MAX_RAMP_STEPS:,}): use a larger INCREMENT")
    per_increment = ramp_samples / increments

    def reached(consumed: int) -> int:  # Megatron-LM's own expression, float division included
        return int(consumed / per_increment) if consumed <= ramp_samples else increments

    steps: dict[int, int] = {0: start}
    for k in range(1, increments + 1):
        at = -(-k * ramp_samples // increments)  # ceil(k × per_increment) in exact arithmetic: adjust for floats
        while at > 0 and reached(at - 1) >= k:
            at -= 1
        while reached(at) < k:
            at += 1
        steps[at] = start + k * increment  # thresholds shared by several k keep the largest batch
    return sorted(steps.items())
