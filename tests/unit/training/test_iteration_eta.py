"""The ETA on the engine's iteration line: remaining iterations at the mean wall time per iteration over the last
20 (issue 46, item 6); the line Megatron-LM users read stays as it was up to the new field."""

from __future__ import annotations

import pytest
from mtk.training import metrics

from mtk.spec import Job


def _writer(tmp_path, iterations: int) -> metrics.MetricsWriter:
    job = Job.model_validate({"name": "t", "model": {"preset": "tiny"},
                              "train": {"global_batch_size": 8, "iterations": iterations}})
    return metrics.MetricsWriter(job, tmp_path, rank=0, world_size=1, padded_vocab=1024, tensorboard=False)


@pytest.mark.parametrize(("seconds", "shown"), [(0, "0s"), (0.4, "0s"), (59, "59s"), (60, "1m00s"), (192, "3m12s"),
                                                (3600 + 5 * 60 + 59, "1h05m"), (86400 * 2 + 3 * 3600, "2d03h")])
def test_duration_is_two_units(seconds, shown):
    assert metrics.format_duration(seconds) == shown


def test_the_first_line_uses_its_step_time_then_the_wall_pace_of_the_last_20(tmp_path, capsys):
    w = _writer(tmp_path, 100)
    w.step(2.0, 0.4, skipped=False)
    w.log(1, 8, 1e-3, 1.0, 1.0)
    assert capsys.readouterr().out.rstrip().endswith("| number of nan iterations:   0 | ETA 40s |")  # 99 × 0.4 s
    assert w.eta(1, 0.4) == pytest.approx(39.6)
    w._stamps.clear()
    w._stamps.extend([10.0 * i for i in range(5)] + [40.0 + 2.0 * i for i in range(1, 30)])  # 10 s, then 2 s each
    assert len(w._stamps) == metrics.PACE_WINDOW + 1
    assert w.eta(40, 2.0) == pytest.approx(60 * 2.0)  # the old 10 s iterations have left the window
    w._stamps.clear()
    w._stamps.extend([0.0, 3.0])  # evals and saves between steps count: the wall time, not the step time
    assert w.eta(98, 0.1) == pytest.approx(6.0)
    assert w.eta(100, 0.1) == 0.0 and w.eta(120, 0.1) == 0.0
    w.close()


def test_the_eta_goes_after_the_megatron_fields_and_before_a_straggler():
    rec = {"iteration": 30, "consumed_samples": 240, "step_time_ms": 1.0, "tflops_per_gpu": 1.0, "tokens_per_s": 1.0,
           "lr": 1e-4, "global_batch_size": 8, "lm_loss": 2.0, "loss_scale": 1.0, "grad_norm": 1.0, "skipped": 0,
           "nan": 0, "straggler": "rank 1"}
    line = metrics.format_line(rec, 30, 0.0)
    assert line.startswith(" iteration       30/      30 | consumed samples:")
    assert line.endswith("| number of nan iterations:   0 | ETA 0s | straggler: rank 1 |")
    assert "ETA" not in metrics.format_line(rec, 30)
