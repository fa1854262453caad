"""Issue #26 on a real Slurm cluster: a GPU job (cluster.slurm.gpu_request auto, the default) is accepted by a
cluster with no GRES configured (like HyperPod without GRES), where an explicit GPU request is refused, and asks
for GPUs on a cluster whose nodes have gpu GRES (count-only, like a ParallelCluster GPU partition); on a
HyperPod-like node (``/opt/sagemaker_cluster`` present, in the test cluster's own mount namespace) the training srun
gets ``--auto-resume=1``, on an ordinary node it does not.

Debian's Slurm has no ``--auto-resume`` option (it belongs to HyperPod's Slurm): an ``srun`` wrapper earlier on
PATH, in these tests only, records every srun's arguments and drops that one option before running the real srun.
What this proves: the batch script detects the marker on the node at run time and passes the option to the training
step (and only to it), and the job then runs to completion through mtk's chain. It does not prove HyperPod's
handling of the option, which needs HyperPod. The node's program is the stub ``mtk-entrypoint`` (exit 0): the
batch script's logic is under test here, not training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.minicluster import MiniCluster
from support.sbatch import directives
from support.slurm_harness import Harness, drained

pytestmark = pytest.mark.integration

SRUN_WRAPPER = """#!/bin/bash
# Records each srun call, then runs Debian's srun without HyperPod's --auto-resume option.
{{ printf '%q ' "$@"; echo; }} >>"{log}"  # one line per call
args=()
for a in "$@"; do [ "$a" = --auto-resume=1 ] || args+=("$a"); done
exec {srun} "${{args[@]}}"
"""


@pytest.fixture(scope="module")
def hyperpod(tmp_path_factory):
    cluster = MiniCluster(tmp_path_factory.mktemp("hyperpod-cluster"), hyperpod=True)
    cluster.start()
    h = Harness(cluster, tmp_path_factory.mktemp("hyperpod"))
    yield h
    drained(h)
    cluster.stop()


def with_srun_wrapper(h: Harness) -> tuple[dict, Path]:
    bin_dir, log = h.root / "wrapped-bin", h.root / "srun-calls.log"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "srun"
    wrapper.write_text(SRUN_WRAPPER.format(log=log, srun=shutil.which("srun")))
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}:{h.env['PATH']}"}, log


def gpu_job(h: Harness, name: str, venv: Path, *sets: str) -> tuple[Path, Path]:
    env, log = with_srun_wrapper(h)
    spec = h.spec(name, cluster={"device": "gpu", "procs_per_node": 1}, resilience={"preflight.enabled": False})
    run = h.launch(spec, f"cluster.slurm.venv={venv}", "cluster.slurm.requeue=false", *sets, env=env)
    h.wait("the job to end", lambda: (run / "state" / "final").exists() and not h.active_jobs(), timeout=300)
    return run, log


def test_hyperpod_node_trains_under_auto_resume_and_no_gres_cluster_accepts_the_gpu_job(hyperpod, stub_venv):
    run, log = gpu_job(hyperpod, "hp", stub_venv)
    assert "gpus-per-node" not in directives((run / "train.sbatch").read_text())
    assert (run / "state" / "final").read_text() == "completed\n"
    calls = log.read_text().splitlines()
    training = [c for c in calls if "mtk-entrypoint train " in c]
    assert len(training) == 1 and training[0].startswith("--auto-resume=1 "), calls
    assert "hyperpod auto-resume on" in (run / "state" / "events.log").read_text()


def test_the_same_cluster_refuses_an_explicit_gpu_request(hyperpod, stub_venv):
    spec = hyperpod.spec("gres", cluster={"device": "gpu", "procs_per_node": 1})
    out = hyperpod.mtk("launch", str(spec), "--backend", "slurm", "--no-megatron-check",
                       "--set", f"cluster.slurm.venv={stub_venv}", "--set", "cluster.slurm.gpu_request=gres",
                       check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cluster.procs_per_node" in out.stderr and "sbatch rejected the job" in out.stderr, out.stderr


def test_an_ordinary_node_gets_no_auto_resume(harness, stub_venv):
    run, log = gpu_job(harness, "plain", stub_venv)
    assert (run / "state" / "final").read_text() == "completed\n"
    training = [c for c in log.read_text().splitlines() if "mtk-entrypoint train " in c]
    assert len(training) == 1 and "--auto-resume" not in training[0]
    assert "hyperpod" not in (run / "state" / "events.log").read_text()


@pytest.fixture(scope="module")
def gres_cluster(tmp_path_factory):
    cluster = MiniCluster(tmp_path_factory.mktemp("gres-cluster"), gpus=1)
    cluster.start()
    h = Harness(cluster, tmp_path_factory.mktemp("gres"))
    yield h
    drained(h)
    cluster.stop()


def test_auto_asks_for_gpus_where_the_partition_has_gpu_gres(gres_cluster, stub_venv):
    h = gres_cluster
    spec = h.spec("gres-auto", cluster={"device": "gpu", "procs_per_node": 1}, resilience={"preflight.enabled": False})
    run = h.launch(spec, f"cluster.slurm.venv={stub_venv}", "cluster.slurm.requeue=false")
    job_id = h.run_record(run)["ids"]["train"]
    h.wait("the job to end", lambda: (run / "state" / "final").exists() and not h.active_jobs(), timeout=300)
    assert (run / "state" / "final").read_text() == "completed\n"
    assert "gpus-per-node" not in directives((run / "train.sbatch").read_text())  # the file stays the same
    record = h.slurm("scontrol", "show", "job", "-o", job_id)
    assert "gres:gpu:1" in record or "gres/gpu=1" in record, record  # asked at submit, as sinfo showed GRES


def test_none_never_asks_even_where_gres_exists(gres_cluster, stub_venv):
    h = gres_cluster
    spec = h.spec("gres-none", cluster={"device": "gpu", "procs_per_node": 1}, resilience={"preflight.enabled": False})
    run = h.launch(spec, f"cluster.slurm.venv={stub_venv}", "cluster.slurm.requeue=false",
                   "cluster.slurm.gpu_request=none")
    job_id = h.run_record(run)["ids"]["train"]
    h.wait("the job to end", lambda: (run / "state" / "final").exists() and not h.active_jobs(), timeout=300)
    record = h.slurm("scontrol", "show", "job", "-o", job_id)
    assert "gres:gpu" not in record and "gres/gpu" not in record, record
