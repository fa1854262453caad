"""Derived figures: parameter counts match the sizes the presets are named after."""

from __future__ import annotations

import pytest

from mtk.figures import bytes_per_parameter, compute
from mtk.spec import validate
from mtk.vocabulary import padded_vocab


def figures(preset: str, **parallel):
    return compute(
        validate(
            {
                "name": "f",
                "model": {"preset": preset},
                "parallel": parallel,
                "cluster": {"nodes": 8, "procs_per_node": 8},
                "train": {"global_batch_size": 512},
            }
        )
    )


@pytest.mark.parametrize(
    ("preset", "billions", "tolerance"),
    [
        ("gpt-1.7b", 1.7, 0.06),
        ("gpt-7.5b", 7.5, 0.04),
        ("gpt-39.1b", 39.1, 0.03),
        ("llama2-7b", 6.74, 0.02),
        ("llama2-70b", 68.98, 0.02),
        ("llama3-8b", 8.03, 0.02),
    ],
)
def test_parameter_count_matches_name(preset, billions, tolerance):
    got = figures(preset).parameters / 1e9
    assert abs(got - billions) / billions < tolerance, got


def test_distributed_optimizer_shards_state():
    f = figures("gpt-7.5b", tp=8)
    assert f.data_parallel == 8
    assert f.gib_per_gpu_distributed_optimizer < f.gib_per_gpu
    assert bytes_per_parameter("bf16", 8, True) == pytest.approx(2 + 4 + 12 / 8)


def test_moe_active_parameters_below_total():
    job = validate(
        {
            "name": "m",
            "model": {"preset": "tiny", "moe": {"num_experts": 8, "router_topk": 2}},
            "cluster": {"nodes": 1, "procs_per_node": 2, "device": "cpu"},
            "parallel": {"ep": 2},
        }
    )
    f = compute(job)
    assert f.active_parameters < f.parameters


def test_padded_vocab():
    assert padded_vocab(50257, 128, 8) == 51200
    assert padded_vocab(1024, 128, 2) == 1024


def test_micro_batches_per_step_is_global_over_micro_times_dp():
    """The one division the figures, the engine and the benchmarks share (TrainSpec.micro_batches)."""
    f = figures("gpt-7.5b", tp=8)  # 64 GPUs / tp 8 = DP 8; global 512, micro 1
    assert f.micro_batches_per_step == 512 // (1 * 8) == 64
    job = validate({"name": "m", "model": {"preset": "tiny"}, "cluster": {"nodes": 1, "procs_per_node": 2},
                    "train": {"global_batch_size": 16, "micro_batch_size": 2}})
    assert job.train.micro_batches(2) == 4 and compute(job).micro_batches_per_step == 4
