"""train.checkpoint.assume_constant_structure (megatron-core's cached save plans, mtk's default) checks before it
reuses: a state dict whose structure changed between saves is planned anew and saved whole, on every rank.

One torchrun of two real gloo ranks with real megatron-core (save_cache_driver.py): the distributed optimizer saved
through Trainer.save before its first step and after it (Adam's state appears), and state dicts built to change
key by key through CheckpointManager. Every save is read back: its ``.metadata`` against what was saved, and a
load compared value by value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("save_cache_driver.py")

# per scenario: which saves (0-based) change the structure the plans were cached from
CHANGED_AT = {"added_at_2nd": [1], "added_at_3rd": [2], "shape_changed": [2], "dtype_changed": [2],
              "sharding_changed": [2], "removed": [2], "added_on_rank1_only": [2], "unchanged": [],
              "added_at_3rd_fully_parallel": [2]}


@pytest.fixture(scope="module")
def result(tmp_path_factory, tr) -> dict:
    out = tmp_path_factory.mktemp("save-cache")
    job = tr.make_job(out / "run", "parallel.tp=1", "parallel.distributed_optimizer=false",
                   "train.checkpoint.save_interval=null", "train.iterations=10")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(DRIVER), str(out), str(job)], cwd=DRIVER.parents[3], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads((out / "result.json").read_text())


def test_adam_state_that_appears_after_the_first_save_is_saved_and_loads_whole(result):
    trainer = result["trainer"]
    assert trainer["0"]["exp_avg_keys"] == 0, trainer  # the trigger: no Adam state before the first step
    for it in ("1", "2"):
        assert trainer[it]["exp_avg_keys"] > 0, trainer  # Adam's state is in .metadata ...
        assert trainer[it]["adam_state_loads_whole"], trainer  # ... and loads back as it was saved
    validated = [r["validated"] for r in trainer["records"]]
    assert validated == [True, True, False], trainer["records"]  # replanned once, then cached again
    changed = [line for line in trainer["log"] if "changed since the save plans were cached" in line]
    assert len(changed) == 1 and "iteration 1" in changed[0] and "added" in changed[0], trainer["log"]


@pytest.mark.parametrize("name", list(CHANGED_AT))
def test_every_save_of_a_changing_state_dict_loads_whole(result, name):
    got = result["scenarios"][name]
    for i, save in enumerate(got["saves"]):
        assert save["loads_whole"], (i, save)
        assert save["metadata_ok"], (i, save)
    validated = [r["validated"] for r in got["records"]]
    assert validated == [i == 0 or i in CHANGED_AT[name] for i in range(len(validated))], got["records"]
    changed = [line for line in got["log"] if "changed since the save plans were cached" in line]
    assert [int(line.split("iteration ")[1].split(":")[0]) - 1 for line in changed] == CHANGED_AT[name], got["log"]
    if name == "added_on_rank1_only":
        assert "on rank 1" in changed[0], changed


def test_the_cached_plans_are_used_again_after_a_replan(result):
    """The check costs the cache nothing when nothing changed: megatron-core's central plan is reused from the
    third save on, and again two saves after a replan."""
    cached = {name: [r["cached_plan"] for r in got["records"]] for name, got in result["scenarios"].items()}
    assert cached["unchanged"] == [False, False, True, True], cached
    assert cached["added_at_2nd"] == [False, False, False, True], cached
    assert cached["added_at_3rd"] == [False, False, False, False], cached
    assert all(r["check_s"] >= 0 for got in result["scenarios"].values() for r in got["records"])
