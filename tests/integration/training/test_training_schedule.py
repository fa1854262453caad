"""The LR schedule built from ``job.train`` (megatron's OptimizerParamScheduler, driven like the loop does)."""

from __future__ import annotations

import math
import types

import pytest

from mtk.spec import Job

pytestmark = pytest.mark.integration  # imports megatron.core


def _lrs(style: str, steps: int = 12, **train) -> list[float]:
    from mtk.training import compat

    compat.install_import_stubs()
    from mtk.training.optim import build_scheduler

    job = Job.model_validate({"name": "t", "model": {"preset": "tiny"}, "train": {
        "lr": 1e-3, "min_lr": 1e-4, "lr_warmup_iters": 2, "iterations": 10, "global_batch_size": 8,
        "lr_decay_style": style, **train}})
    opt = types.SimpleNamespace(param_groups=[{"lr": 0.0, "weight_decay": 0.0}])
    sched = build_scheduler(job, opt)
    out = []
    for _ in range(steps):  # the lr each optimizer step uses; the scheduler advances after the step
        out.append(opt.param_groups[0]["lr"])
        sched.step(increment=8)
    return out


def test_linear_warmup_then_cosine_to_min_lr():
    lrs = _lrs("cosine")
    assert lrs[:3] == pytest.approx([0.0, 5e-4, 1e-3])
    # cosine over the 8 post-warmup iterations, then held at min_lr
    for i in range(2, 11):
        ratio = (i - 2) / 8
        want = 1e-4 + (1e-3 - 1e-4) * 0.5 * (math.cos(math.pi * ratio) + 1)
        assert lrs[i] == pytest.approx(want)
    assert lrs[11] == pytest.approx(1e-4)


def test_linear_and_constant_styles():
    lin = _lrs("linear")
    assert lin[6] == pytest.approx(1e-3 - (1e-3 - 1e-4) * 4 / 8)
    const = _lrs("constant")
    assert const[2:] == pytest.approx([1e-3] * 10)


def _resumed(choice: str, from_iterations: int = 10, to_iterations: int = 20, steps: int = 5):
    """A scheduler for ``to_iterations`` loading the state of one for ``from_iterations`` after ``steps``."""
    from mtk.training.optim import build_scheduler

    def sched(iterations):
        job = Job.model_validate({"name": "t", "model": {"preset": "tiny"}, "train": {
            "lr": 1e-3, "min_lr": 1e-4, "iterations": iterations, "global_batch_size": 8,
            "lr_schedule_on_resume": choice}})
        opt = types.SimpleNamespace(param_groups=[{"lr": 0.0, "weight_decay": 0.0}])
        return build_scheduler(job, opt), opt

    old, _ = sched(from_iterations)
    for _ in range(steps):
        old.step(increment=8)
    new, opt = sched(to_iterations)
    new.load_state_dict(old.state_dict())
    return new, opt


def test_resume_with_a_longer_run_replans_the_decay_with_replan():
    """replan: the spec's schedule wins over the checkpoint's; only the step count is restored."""
    new, opt = _resumed("replan")
    assert new.num_steps == 40
    assert new.lr_decay_steps == 20 * 8
    want = 1e-4 + (1e-3 - 1e-4) * 0.5 * (math.cos(math.pi * 5 / 20) + 1)
    assert opt.param_groups[0]["lr"] == pytest.approx(want)


def test_resume_with_a_longer_run_keeps_the_checkpoint_schedule_by_default():
    """keep (the default): the checkpoint's horizon and step; past it the LR stays at min_lr."""
    from mtk.spec.train import TrainSpec

    assert TrainSpec().lr_schedule_on_resume == "keep"
    new, opt = _resumed("keep", steps=5)
    assert new.num_steps == 40 and new.lr_decay_steps == 10 * 8
    want = 1e-4 + (1e-3 - 1e-4) * 0.5 * (math.cos(math.pi * 5 / 10) + 1)
    assert opt.param_groups[0]["lr"] == pytest.approx(want)
    ended, opt = _resumed("keep", steps=10)
    ended.step(increment=8)  # iteration 11 of 20, beyond the checkpoint's 10-iteration decay
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-4)
