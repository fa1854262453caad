"""The resilience section of the job spec and the elastic-range refusal (EKS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtk.spec import SpecError, validate
from mtk.spec.loader import apply_overrides

REPO = Path(__file__).resolve().parents[3]


def tiny(*sets: str) -> dict:
    return apply_overrides(yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text()), list(sets))


def eks(*sets: str) -> dict:
    return tiny("cluster.nodes=2", "cluster.procs_per_node=1", "image.registry=r.example/x",
                "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data", *sets)


def test_elastic_range_is_refused_with_the_fix():
    with pytest.raises(SpecError) as info:
        validate(eks("cluster.eks.min_nodes=1"), backend="eks")
    (problem,) = [p for p in info.value.problems if p.path == "cluster.eks.min_nodes"]
    assert "elastic ranges are not supported" in problem.message and "set it to 2" in problem.message
    assert validate(eks("cluster.eks.min_nodes=2"), backend="eks").cluster.eks.min_nodes == 2


@pytest.mark.megatron  # starts the training worker (torch + megatron-core)
def test_a_smaller_world_is_what_the_refusal_prevents(tmp_path):
    """The hole itself: a rank started in a world smaller than the spec's stops at the world-size check."""
    job = validate(eks())
    path = tmp_path / "job.json"
    path.write_text(job.to_json())
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "mtk.training.worker", "--job", str(path), "--run-dir",
                          str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0
    assert "torchrun started 1 processes but the job spec says" in out.stderr, out.stderr[-2000:]


def test_watchdog_and_straggler_fields_validate():
    job = validate(tiny("resilience.watchdog.step_timeout=30", "resilience.stragglers.interval=10"))
    assert job.resilience.watchdog.step_timeout == 30 and job.resilience.stragglers.interval == 10
    with pytest.raises(SpecError) as info:
        validate(tiny("resilience.watchdog.factor=0.5"))
    assert [p.path for p in info.value.problems] == ["resilience.watchdog.factor"]
