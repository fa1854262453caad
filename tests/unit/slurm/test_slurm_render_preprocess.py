"""The preprocess step's sbatch: a job array for data.corpus.shards (with its % throttle and one log per task),
and CPUs asked for what the workers use (the cgroup gives a task only what it asked for)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths
from mtk.slurm.render import render
from support.sbatch import directives, parse_directive_value

from mtk.spec import load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "/shared/runs/r1"


def job_of(example: str, sets: list[str]):
    return resolve_paths(load_job(EXAMPLES / example, sets, backend="slurm"), "slurm", cwd="/shared")




def _script(sets: list[str]) -> str:
    return render(job_of("tiny-slurm.yaml", sets), RUN).files["preprocess.sbatch"]


def _srun_args(script: str) -> list[str]:
    block = script.split("MTK_SRUN_ARGS=(\n", 1)[1].split("\n)", 1)[0]
    return [parse_directive_value(line.strip()) for line in block.splitlines()]


def test_sharded_preprocess_is_a_throttled_array_with_a_log_per_task():
    script = _script(["data.corpus.shards=4", "data.corpus.max_parallel=2", "data.corpus.workers=3"])
    d = directives(script)
    assert d["array"] == ["0-3%2"]
    assert d["output"] == [f"{RUN}/logs/preprocess-%A_%a.out"]
    assert d["cpus-per-task"] == ["3"], "the workers' CPUs, not cluster.slurm.cpus_per_task=1"
    assert "--cpus-per-task=3" in _srun_args(script)
    assert d["nodes"] == ["1"]
    train = directives(render(job_of("tiny-slurm.yaml", ["data.corpus.shards=4"]), RUN).files["train.sbatch"])
    assert "array" not in train and train["cpus-per-task"] == ["1"]


def test_unthrottled_array_and_unsharded_step():
    assert directives(_script(["data.corpus.shards=3"]))["array"] == ["0-2%3"]
    assert "array" not in directives(_script([]))


def test_preprocess_without_a_worker_count_gets_a_share_or_the_whole_node_if_asked():
    """Workers default to the CPUs the task may use: without a count the step asks for DATA_CPUS of a shared
    node (never a whole node by default), or the whole node with cluster.slurm.data.exclusive."""
    from mtk.slurm.options import DATA_CPUS

    d = directives(_script(["data.corpus.workers=null", "cluster.slurm.cpus_per_task=null"]))
    assert "exclusive" not in d and d["cpus-per-task"] == [str(DATA_CPUS)]
    d = directives(_script(["data.corpus.workers=null", "cluster.slurm.data.exclusive=true"]))
    assert "exclusive" in d and "cpus-per-task" not in d


@pytest.mark.parametrize("sets", [["data.corpus.shards=4", "data.corpus.max_parallel=2"],
                                  ["data.corpus.workers=null", "cluster.slurm.cpus_per_task=null"],
                                  ["data.corpus.workers=null", "cluster.slurm.data.exclusive=true"]])
def test_array_script_passes_shellcheck(tmp_path, sets):
    path = tmp_path / "preprocess.sbatch"
    path.write_text(_script(sets))
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert shutil.which("shellcheck")
    check = subprocess.run(["shellcheck", "--severity=style", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
