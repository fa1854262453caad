"""Which node names a damaged checkpoint: node 0 of a Slurm job or a static PyTorchJob; every pod of an elastic
one (its rank is known only after the rendezvous, and each pod has its own log); the others give a pointer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mtk.launcher.ckpt_precheck import CheckpointDamaged, check_resume_checkpoint_once

from mtk.spec import load_job

TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")


@pytest.fixture
def damaged(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "iter_0000010").mkdir(parents=True)  # no .metadata: not a complete torch_dist checkpoint
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10\n")
    return load_job(TINY, [f"train.checkpoint.dir={ckpt}"]), str(tmp_path), str(ckpt / "iter_0000010" / ".metadata")


@pytest.mark.parametrize("env,names_file", [
    ({}, True),
    ({"SLURM_JOB_ID": "7", "SLURM_NODEID": "0"}, True),
    ({"SLURM_JOB_ID": "7", "SLURM_NODEID": "1"}, False),
    ({"PET_NODE_RANK": "0", "PET_MASTER_ADDR": "m"}, True),
    ({"PET_NODE_RANK": "2", "PET_MASTER_ADDR": "m"}, False),
    ({"PET_NODE_RANK": "2", "PET_RDZV_ENDPOINT": "etcd:2379"}, True),
])
def test_only_the_reporting_node_names_the_file(damaged, env, names_file):
    job, run_dir, metadata = damaged
    with pytest.raises(CheckpointDamaged) as err:
        check_resume_checkpoint_once(job, run_dir, env)
    assert (metadata in str(err.value)) is names_file, str(err.value)
    if not names_file:
        assert "node 0 reports which file" in str(err.value)
    assert err.value.exit_code == 2


NODES = ({}, {"SLURM_JOB_ID": "7", "SLURM_NODEID": "1"})
INTACT = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_lm" / "plain_tp2"  # written by Megatron-LM


def test_an_absent_checkpoint_passes_on_every_node(tmp_path):
    job = load_job(TINY, [f"train.checkpoint.dir={tmp_path / 'none'}"])
    for env in NODES:
        check_resume_checkpoint_once(job, str(tmp_path), env)


def test_an_intact_checkpoint_passes_on_every_node_and_the_same_one_truncated_does_not(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(INTACT / "checkpoints", ckpt)
    overrides = json.loads((INTACT / "fixture.json").read_text())["mtk_overrides"]
    job = load_job(TINY, [*overrides, f"train.checkpoint.dir={ckpt}"])
    for env in NODES:
        check_resume_checkpoint_once(job, str(tmp_path), env)
    # The same checkpoint with one shard cut short: the pass above was a real check, not a skipped one.
    shard = next((ckpt / "iter_0000004").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointDamaged, match=shard.name):
        check_resume_checkpoint_once(job, str(tmp_path), {})
