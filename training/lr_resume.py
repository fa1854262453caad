"""What a resume does to the learning-rate schedule, said in one line when it matters.

A checkpoint carries its OptimizerParamScheduler state (peak and final LR, warmup, decay horizon, style, step).
When the spec's schedule differs — most often ``train.iterations`` raised to train further — the run either keeps
the checkpoint's schedule or re-plans to the spec's (``train.lr_schedule_on_resume``). Both are legitimate; a
silent choice is not: re-planning a finished cosine run lifts its LR from min_lr back up (the classic loss spike),
keeping it trains the extension at min_lr. The line names both schedules, the choice, and the LR the next
iteration logs under each, so the user sees the jump (or its absence) before the first step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from mtk.batch_schedule import BatchSchedule


@dataclass(frozen=True)
class Horizon:
    """A schedule in the spec's units (iterations of the run's global batch, or of its batch-size schedule)."""

    max_lr: float
    min_lr: float
    warmup_iters: float
    decay_iters: float
    style: str

    def describe(self) -> str:
        return (f"{self.style} {self.max_lr:.3g}→{self.min_lr:.3g}, warmup {_iters(self.warmup_iters)}, "
                f"decay to iteration {_iters(self.decay_iters)}")


def _iters(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _first(state: dict[str, Any], *keys: str) -> Any:
    """Megatron's scheduler state under its current or legacy key (``load_state_dict`` reads the same)."""
    return next(state[k] for k in keys if k in state)


def of_state(state: dict[str, Any], batches: BatchSchedule) -> Horizon:
    """The schedule a checkpoint's ``opt_param_scheduler`` state holds (its steps are samples)."""
    return Horizon(float(_first(state, "start_lr", "max_lr")), float(state["min_lr"]),
                   batches.span(_first(state, "warmup_iter", "warmup_steps", "lr_warmup_steps")),
                   batches.span(_first(state, "end_iter", "decay_steps", "lr_decay_steps")),
                   str(_first(state, "decay_style", "lr_decay_style")))


def of_scheduler(scheduler: Any, batches: BatchSchedule) -> Horizon:
    """The schedule a live OptimizerParamScheduler follows."""
    return Horizon(float(scheduler.max_lr), float(scheduler.min_lr), batches.span(scheduler.lr_warmup_steps),
                   batches.span(scheduler.lr_decay_steps), str(scheduler.lr_decay_style))


def next_lr(scheduler: Any, horizon: Horizon | None, batches: BatchSchedule) -> float:
    """The LR the next iteration logs (the scheduler's value one step on): as the run will compute it (``None``),
    or had it followed ``horizon``."""
    probe = copy.copy(scheduler)  # get_lr reads only plain attributes: a shallow copy leaves the run's alone
    probe.num_steps = scheduler.num_steps + batches.batch_at(scheduler.num_steps)
    groups = scheduler.optimizer.param_groups
    group = next((g for g in groups if g.get("default_config", True)), groups[0])
    if horizon is None:
        return float(probe.get_lr(group))
    probe.max_lr, probe.min_lr, probe.lr_decay_style = horizon.max_lr, horizon.min_lr, horizon.style
    probe.lr_warmup_steps = round(_samples(batches, horizon.warmup_iters))
    probe.lr_decay_steps = round(_samples(batches, horizon.decay_iters))
    # a param group's own max_lr/min_lr win in get_lr: drop them so that the horizon's apply
    return float(probe.get_lr({k: v for k, v in group.items() if k not in ("max_lr", "min_lr")}))


def _samples(batches: BatchSchedule, iterations: float) -> float:
    """:meth:`BatchSchedule.span` back: fractional iterations in samples."""
    whole = int(iterations)
    start = batches.samples(whole)
    return start + (iterations - whole) * batches.batch_at(start)


def resume_line(scheduler: Any, spec: Horizon, saved_state: dict[str, Any], batches: BatchSchedule,
                choice: str) -> str | None:
    """One line when the checkpoint's schedule differs from the spec's (None when they agree): both horizons,
    which one this run follows, and the next iteration's LR under each. Call after ``load_state_dict``."""
    saved = of_state(saved_state, batches)
    if saved == spec:
        return None
    iteration = round(batches.span(scheduler.num_steps)) + 1
    other = spec if choice == "keep" else saved
    other_name = "replan" if choice == "keep" else "keep"
    whose = "the checkpoint's" if choice == "keep" else "this spec's"
    return (f"[checkpoint] LR schedule differs from the checkpoint's: checkpoint {saved.describe()}; spec "
            f"{spec.describe()}. Following {whose} (train.lr_schedule_on_resume: {choice}): iteration {iteration} "
            f"lr {next_lr(scheduler, None, batches):.6E} ({other_name} would give "
            f"{next_lr(scheduler, other, batches):.6E})")


def record_in_args(args: Any, scheduler: Any, gbs: int) -> None:
    """Make a checkpoint's Megatron-LM ``args`` name the schedule the run follows (after a ``keep`` resume that is
    the checkpoint's, not the spec's), so ``megatron_lm_args.txt`` continues it without Megatron-LM's mismatch
    assertion."""
    from mtk.megatron_flags import record_schedule

    record_schedule(args, scheduler, gbs)  # lr, min_lr, style, warmup and decay: the flag table's rows
