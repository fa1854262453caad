"""The data steps (getdata, preprocess) on the right nodes (issue 46 item 3): their own partition, time, CPUs,
memory and exclusivity under ``cluster.slurm.data``; by default a share of a node, never a GPU node exclusively
nor the train step's memory; the train step's directives unchanged by any of it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths
from mtk.slurm.options import DATA_CPUS
from mtk.slurm.render import render
from support.sbatch import directives

from mtk.spec import load_job
from mtk.spec.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "/fsx/runs/gpt-7-5b-p5-20261128-000000"
P5 = "gpt-7.5b-p5-slurm.yaml"  # partition-less GPU example: exclusive, one day, getdata + preprocess + train
GPU_TRAIN = ["cluster.slurm.partition=gpu", "cluster.slurm.mem='0'", "cluster.slurm.cpus_per_task=96"]


def files(sets: list[str]) -> dict[str, str]:
    job = resolve_paths(load_job(EXAMPLES / P5, sets, backend="slurm"), "slurm", cwd="/fsx")
    return render(job, RUN).files


def test_by_default_a_data_step_takes_a_share_of_a_node_in_the_train_steps_queue_and_time():
    out = files(GPU_TRAIN)
    train = directives(out["train.sbatch"])
    assert "exclusive" in train and train["partition"] == ["gpu"] and train["time"] == ["1-00:00:00"]
    assert train["mem"] == ["0"] and train["cpus-per-task"] == ["96"]
    getdata, preprocess = directives(out["getdata.sbatch"]), directives(out["preprocess.sbatch"])
    for d in (getdata, preprocess):
        assert "exclusive" not in d, "a data step never holds a GPU node exclusively"
        assert "mem" not in d, "nor the train step's memory ('0' is the whole node)"
        assert d["partition"] == ["gpu"] and d["time"] == ["1-00:00:00"]
        assert d["nodes"] == ["1"] and d["ntasks-per-node"] == ["1"]
    assert getdata["cpus-per-task"] == ["1"]
    workers = load_job(EXAMPLES / P5, GPU_TRAIN, backend="slurm").data.corpus.workers
    assert preprocess["cpus-per-task"] == [str(workers or DATA_CPUS)]
    no_workers = directives(files([*GPU_TRAIN, "data.corpus.workers=null"])["preprocess.sbatch"])
    assert no_workers["cpus-per-task"] == [str(DATA_CPUS)] and "exclusive" not in no_workers


def test_the_data_block_sets_partition_time_cpus_memory_and_exclusivity_and_leaves_training_alone():
    data = ["cluster.slurm.data.partition=cpu", "cluster.slurm.data.time=04:00:00",
            "cluster.slurm.data.cpus_per_task=16", "cluster.slurm.data.mem=64G", "cluster.slurm.data.exclusive=true"]
    out, before = files([*GPU_TRAIN, *data]), files(GPU_TRAIN)
    assert out["train.sbatch"] == before["train.sbatch"], "the train step's settings are not the data steps'"
    getdata = directives(out["getdata.sbatch"])
    assert getdata["partition"] == ["cpu"] and getdata["time"] == ["04:00:00"] and getdata["mem"] == ["64G"]
    assert getdata["cpus-per-task"] == ["16"] and "exclusive" in getdata
    # preprocess asks for its workers' CPUs when the spec counts them; the data block's otherwise
    preprocess = directives(files([*GPU_TRAIN, *data, "data.corpus.workers=null"])["preprocess.sbatch"])
    assert preprocess["cpus-per-task"] == ["16"] and preprocess["partition"] == ["cpu"]
    whole = directives(files([*GPU_TRAIN, "cluster.slurm.data.exclusive=true", "data.corpus.workers=null"])
                       ["preprocess.sbatch"])
    assert "exclusive" in whole and "cpus-per-task" not in whole, "exclusive + no count: every CPU of the node"


def test_a_bad_data_time_names_its_field():
    with pytest.raises(SpecError) as err:
        files(["cluster.slurm.data.time=tomorrow"])
    assert "cluster.slurm.data.time" in str(err.value)


def test_hostile_data_partition_is_quoted_or_refused():
    line = next(ln for ln in files(["cluster.slurm.data.partition='cpu; rm -rf /'"])["getdata.sbatch"].splitlines()
                if "--partition" in ln)
    assert line == '#SBATCH --partition="cpu; rm -rf /"'
    with pytest.raises(SpecError) as err:
        files(['cluster.slurm.data.partition="cpu\\nrm -rf /"'])
    assert "cluster.slurm.data.partition" in str(err.value)


def test_data_step_scripts_pass_shellcheck(tmp_path):
    out = files([*GPU_TRAIN, "cluster.slurm.data.partition=cpu", "cluster.slurm.data.mem=8G"])
    assert shutil.which("shellcheck")
    for name in ("getdata.sbatch", "preprocess.sbatch"):
        path = tmp_path / name
        path.write_text(out[name])
        check = subprocess.run(["shellcheck", "--severity=style", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
