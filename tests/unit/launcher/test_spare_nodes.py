"""Spare nodes (``cluster.nodes: MIN:MAX``, Slurm): the spec, its refusals, the sbatch request, the rendezvous on
part of an allocation and the per-attempt job the workers get. The cluster run: tests/integration/slurm/
test_slurm_spare_nodes.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths
from mtk.launcher.train_step import job_for_node_count
from mtk.slurm import environment as slurm_environment
from mtk.slurm.environment import expand_nodelist
from mtk.slurm.render import render
from support.sbatch import directives

from mtk.rendezvous import RendezvousError, from_environment
from mtk.spec import SpecError, load_job, validate
from mtk.spec.loader import parse_yaml

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "examples" / "seed-multinode.yaml"
FITS = ["train.global_batch_size=12"]  # micro batch 1 × DP 2 and 3 both divide it


@pytest.fixture(autouse=True)
def _parsed_host_lists(monkeypatch):
    """The host lists here are made up: expand them with the parser, never by asking this machine's scontrol."""
    monkeypatch.setattr(slurm_environment, "slurm_hostnames", expand_nodelist)


def spare_job(*sets: str, backend: str = "slurm"):
    return load_job(SEED, ["cluster.nodes=2:3", *FITS, *sets], backend=backend)


def test_unquoted_ranges_and_times_are_strings_not_base_60_integers():
    """YAML 1.1 reads 2:3 as 123 and 01:30:00 as 5400; the spec loader does not."""
    data = parse_yaml("cluster:\n  nodes: 2:3\n  slurm:\n    time: 01:30:00\n    runtime: bare\nother: 12\n", "x.yaml")
    assert data == {"cluster": {"nodes": "2:3", "slurm": {"time": "01:30:00", "runtime": "bare"}}, "other": 12}
    job = validate({"name": "n", "model": {"preset": "tiny"}, "train": {"global_batch_size": 12},
                    "cluster": data["cluster"] | {"procs_per_node": 1, "device": "cpu"}}, backend="slurm")
    assert (job.cluster.min_nodes, job.cluster.nodes, list(job.cluster.node_counts)) == (2, 3, [2, 3])
    assert job.cluster.slurm.time == "01:30:00"
    assert validate(json.loads(job.to_json())).cluster.min_nodes == 2  # job.json round-trips


@pytest.mark.parametrize(("value", "says"), [
    ("3:2", "MAX below MIN; write 2:3"),
    ("2:5", "5 nodes: train.global_batch_size 12 not divisible by micro_batch_size × DP = 1 × 5"),
])
def test_bad_ranges_are_refused_naming_cluster_nodes(value, says):
    with pytest.raises(SpecError) as info:
        load_job(SEED, [f"cluster.nodes={value}", *FITS], backend="slurm")
    (problem,) = [p for p in info.value.problems if p.path == "cluster.nodes"]
    assert says in problem.message and problem.value == value


def test_a_range_that_is_not_min_colon_max_is_named():
    with pytest.raises(SpecError) as info:
        load_job(SEED, ["cluster.nodes='2-3'"], backend="slurm")
    assert "nodes '2-3': write a node count (8) or a spare-node range MIN:MAX (8:10)" in str(info.value)


@pytest.mark.parametrize("backend", ["eks", "local"])
def test_ranges_are_slurm_only(backend):
    with pytest.raises(SpecError) as info:
        spare_job("image.registry=r.example/x", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data", backend=backend)
    (problem,) = [p for p in info.value.problems if p.path == "cluster.nodes" and "MIN:MAX" in p.message]
    assert "for Slurm only" in problem.message and "set a single count, e.g. 3" in problem.message


def test_sbatch_asks_for_a_range_and_the_script_picks_the_nodes():
    job = resolve_paths(spare_job(), "slurm", cwd="/shared")
    script = render(job, "/shared/runs/r").files["train.sbatch"]
    d = directives(script)
    assert d["nodes"] == ["2-3"]
    assert "ntasks-per-node" not in d, "with tasks per node Slurm sizes the job to MIN nodes: no spare"
    assert "MTK_NODES_WANTED=2\n" in script
    srun_args = script.split("MTK_SRUN_ARGS=(")[1].split(")")[0]
    assert "--nodes" not in srun_args and "--ntasks-per-node=1" in srun_args
    assert '--nodes="$MTK_TRAIN_COUNT" --nodelist="$MTK_TRAIN_NODELIST"' in script
    fixed = render(resolve_paths(load_job(SEED, FITS, backend="slurm"), "slurm", cwd="/shared"), "/shared/runs/r")
    fixed_script = fixed.files["train.sbatch"]
    assert directives(fixed_script)["nodes"] == ["2"] and "MTK_TRAIN_NODELIST" not in fixed_script


def test_rendezvous_on_the_healthy_part_of_an_allocation():
    """srun on node2,node3 of node[1-3]: the step's list and node ids, node2 hosts the store."""
    job = spare_job()
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_STEP_NODELIST": "node[2-3]",
           "SLURM_NNODES": "2", "SLURM_NODEID": "1", "MTK_RDZV_PORT": "23000"}
    r = from_environment(job, env)
    args = dict(zip(r.args[::2], r.args[1::2], strict=True))
    assert args["--nnodes"] == "2" and args["--node-rank"] == "1" and args["--rdzv-endpoint"] == "node2:23000"
    with pytest.raises(RendezvousError, match=r"spare-node range cluster\.nodes=2:3"):
        from_environment(job, {**env, "SLURM_STEP_NODELIST": "node1", "SLURM_NNODES": "1", "SLURM_NODEID": "0"})


def test_workers_get_the_job_with_this_attempts_node_count(tmp_path):
    path = Path(job_for_node_count(spare_job(), str(tmp_path), 2))
    assert path == tmp_path / "state" / "job.2nodes.json"
    fixed = validate(json.loads(path.read_text()), backend="slurm")
    assert (fixed.cluster.nodes, fixed.cluster.min_nodes, fixed.cluster.world_size) == (2, None, 2)
    assert fixed.train.global_batch_size == 12
