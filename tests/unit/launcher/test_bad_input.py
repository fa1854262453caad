"""A hostile-input battery, one test per class (issue #28, item 6): every refusal is exit 2, one message that
names the field or file and the fix, and nothing written — no run dir, no preview, no partial file.

Each test drives the real command (``python -m mtk``, ``mtk-entrypoint``) in an empty working directory and
compares the directory before and after.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TINY = str(EXAMPLES / "tiny.yaml")
# A Slurm spec this machine accepts up to the submit (absolute data dir, a venv to activate), no megatron check.
SLURM = ["--backend", "slurm", "--no-megatron-check", "--set", "data.dir=/shared/data",
         "--set", "cluster.slurm.runtime=bare", "--set", "cluster.slurm.venv=/shared/venv"]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def run(cwd: Path, *argv: str, env: dict | None = None, module: str = "mtk") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, **(env or {})})


def refused(cwd: Path, *argv: str, env: dict | None = None, module: str = "mtk") -> str:
    """Run, and assert the contract: exit 2, no traceback, nothing new under ``cwd``. Returns stderr."""
    before = _tree(cwd)
    out = run(cwd, *argv, env=env, module=module)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr
    assert _tree(cwd) == before, f"written: {sorted(_tree(cwd) - before)}"
    return out.stderr


# ---- 1. environment keys that torchrun, Slurm or mtk own ------------------------------------------------------
def test_env_keys_owned_by_torchrun_or_slurm_are_refused_by_name(tmp_path):
    owned = {"RANK": "torchrun", "WORLD_SIZE": "torchrun", "LOCAL_RANK": "torchrun", "MASTER_ADDR": "torchrun",
             "MASTER_PORT": "torchrun", "GROUP_RANK": "torchrun", "TORCHELASTIC_RESTART_COUNT": "torchrun",
             "PET_NNODES": "torchrun", "SLURM_NODEID": "Slurm", "SRUN_CPUS_PER_TASK": "Slurm",
             "SBATCH_PARTITION": "Slurm", "MTK_RUN_DIR": "mtk"}
    sets = [a for key in owned for a in ("--set", f'cluster.env.{key}="1"')]
    err = refused(tmp_path, "launch", TINY, "--dry-run", *SLURM, *sets, "--set", "cluster.secrets=[LOCAL_WORLD_SIZE]")
    for key, who in owned.items():
        line = next((ln for ln in err.splitlines() if f"cluster.env.{key}:" in ln), "")
        assert who in line and "Remove it" in line, (key, err)
    assert "cluster.secrets.0.name: LOCAL_WORLD_SIZE is set for every process by torchrun" in err
    assert "cluster.procs_per_node" in err and "extra_sbatch" in err  # the fixes: what to set instead


def test_env_keys_a_job_may_set_stay_allowed():
    from mtk.spec import load_job

    job = load_job(TINY, ['cluster.env.CUDA_VISIBLE_DEVICES="0,1"', 'cluster.env.MTK_DEBUG="1"',
                          'cluster.env.OMP_NUM_THREADS="4"', "cluster.env.NCCL_SOCKET_IFNAME=eth0",
                          "cluster.env.MY_RANKING=x"])
    assert set(job.cluster.env) == {"CUDA_VISIBLE_DEVICES", "MTK_DEBUG", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME",
                                    "MY_RANKING"}


# ---- 2. numbers out of range -------------------------------------------------------------------------------------
def test_out_of_range_numbers_are_refused_by_field(tmp_path):
    bad = {"train.iterations": "100000000000000000000000", "train.lr": ".inf", "train.min_lr": ".nan",
           "train.seed": str(2**32), "cluster.slurm.signal_lead": "70000", "model.num_layers": "20000",
           "model.vocab_size": str(2**31), "cluster.pg_timeout_s": str(10**9),
           "data.corpus.shard_mb": "0", "data.corpus.weight": "-1", "debug.nsys.ranks": f"[{2**64}]"}
    sets = [a for k, v in bad.items() for a in ("--set", f"{k}={v}")]
    err = refused(tmp_path, "launch", TINY, "--dry-run", *SLURM, *sets, "--set", "data.corpus.input=c.jsonl",
                  "--set", "data.corpus.output_prefix=c")
    for field in bad:
        assert f"  - {field}" in err, (field, err)
    assert "must fit in 64 bits" in err and "finite number" in err and "less than or equal to 65535" in err


def test_token_counts_past_int64_are_refused_naming_the_field(tmp_path):
    err = refused(tmp_path, "launch", TINY, "--dry-run", *SLURM, "--set", f"train.iterations={2**60}")
    assert "train.iterations" in err and "64-bit counters" in err and "lower it" in err


def test_preprocess_flags_out_of_range_are_usage_errors(tmp_path):
    for flag, value in (("--max-doc-mb", "-1"), ("--shard-mb", "0"), ("--workers", "0"), ("--tasks", "0"),
                        ("--task-index", "-1"), ("--shard-mb", "nan")):
        err = refused(tmp_path, "preprocess", "--input", "c.jsonl", "--output-prefix", "out/c", flag, value,
                      module="mtk.launcher.entrypoint")
        assert f"argument {flag}: {value} is out of range" in err, err


# ---- 3. mtk-entrypoint without a step ----------------------------------------------------------------------------
def test_entrypoint_without_a_step_is_a_usage_error(tmp_path):
    err = refused(tmp_path, module="mtk.launcher.entrypoint")
    assert "no step given" in err and "mtk-entrypoint train --job JOB.json" in err and "steps:" in err
    assert run(tmp_path, "--help", module="mtk.launcher.entrypoint").returncode == 0  # asking for help is fine


# ---- 5. a damaged kubeconfig -------------------------------------------------------------------------------------
EKS = ["--backend", "eks", "--no-megatron-check",
       "--set", "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
       "--set", "cluster.runs_dir=/fsx/runs", "--set", "data.dir=/fsx/data"]


@pytest.mark.parametrize("text", ["apiVersion: v1\nclusters: [{\n", "- just\n- a list\n", "clusters: 5\n"])
def test_a_damaged_kubeconfig_is_named_with_the_fix(tmp_path, text):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    err = refused(work, "launch", TINY, *EKS, env={"KUBECONFIG": str(kubeconfig)})
    assert f"kubeconfig {kubeconfig} is not" in err and "aws eks update-kubeconfig" in err, err
    assert "ParserError" not in err and "ScannerError" not in err


def test_the_client_names_a_damaged_kubeconfig_too(tmp_path, monkeypatch):
    """`mtk status/logs/cancel` of an EKS run reach the client without a launch: the same message, exit 2."""
    from mtk.k8s.client import KubeconfigError, load_api_client

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("users: {a: [\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError) as exc:
        load_api_client()
    assert exc.value.exit_code == 2 and str(kubeconfig) in str(exc.value) and "line 2" in str(exc.value)


# ---- 6. the Pyxis image must exist where the launch can see it ----------------------------------------------------
def test_slurm_launch_refuses_a_pyxis_image_that_is_not_a_readable_file(tmp_path):
    missing = tmp_path / "images" / "mtk.sqsh"
    pyxis = [*SLURM, "--set", "cluster.slurm.runtime=pyxis", "--set", f"image.sqsh={missing}"]
    err = refused(tmp_path, "launch", TINY, *pyxis)
    assert "image.sqsh" in err and str(missing) in err and "does not exist" in err and "mtk build-image --sqsh" in err
    missing.parent.mkdir()
    missing.mkdir()  # a directory where the file should be
    err = refused(tmp_path, "launch", TINY, *pyxis)
    assert "is a directory" in err
    err = refused(tmp_path, "launch", TINY, *SLURM, "--set", "cluster.slurm.runtime=pyxis",
                  "--set", f"cluster.slurm.container_image={missing}/x.sqsh")
    assert "cluster.slurm.container_image" in err and "image reference" in err


def test_pyxis_image_check_passes_a_readable_file_and_an_image_reference(tmp_path):
    from mtk.slurm.image_check import image_problems

    from mtk.spec import load_job

    sqsh = tmp_path / "mtk.sqsh"
    sqsh.write_bytes(b"hsqs")
    job = load_job(TINY, ["cluster.slurm.runtime=pyxis", f"image.sqsh={sqsh}"])
    assert image_problems(job) == []
    job = load_job(TINY, ["cluster.slurm.runtime=pyxis", "cluster.slurm.container_image=nvcr.io#nvidia/pytorch:25"])
    assert image_problems(job) == []
    # a dry run and `mtk render` never look: the file may be built later, on another machine
    out = run(tmp_path, "launch", TINY, "--dry-run", *SLURM, "--set", "cluster.slurm.runtime=pyxis",
              "--set", f"image.sqsh={tmp_path}/later.sqsh", "--out", str(tmp_path / "preview"))
    assert out.returncode == 0, out.stderr


# ---- 7. mtk logs --node that names no node of the run ------------------------------------------------------------
def _slurm_run(root: Path) -> Path:
    from mtk.runs import Run

    run_dir = root / "runs" / "tiny-1"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "state").mkdir()
    (run_dir / "state" / "nodes.17").write_text("node1 node2\n")
    (run_dir / "logs" / "train-17.out").write_text("0: from node1\n1: from node2\n")
    Run(backend="slurm", run_dir=str(run_dir), name="tiny", ids={"train": "17"}).save()
    return run_dir


def test_logs_refuse_a_node_the_slurm_run_does_not_have(tmp_path):
    run_dir = _slurm_run(tmp_path)
    for node in ("node9", "2"):
        err = refused(tmp_path, "logs", str(run_dir), "--node", node)
        assert f"--node {node!r}" in err and "0 (node1), 1 (node2)" in err, err
    out = run(tmp_path, "logs", str(run_dir), "--node", "node2")
    assert out.returncode == 0 and out.stdout == "1: from node2\n"


def test_logs_refuse_a_node_or_step_the_local_run_does_not_have(tmp_path):
    from mtk.runs import Run

    run_dir = tmp_path / "runs" / "tiny-1"
    assert run(tmp_path, "launch", TINY, "--dry-run", "--no-megatron-check", "--run-dir", str(run_dir)).returncode == 0
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "train.log").write_text("iteration 1\n")
    Run(backend="local", run_dir=str(run_dir), name="tiny", ids={"runner": "0"},
        extra={"host": socket.gethostname()}).save()
    err = refused(tmp_path, "logs", str(run_dir), "--node", "node2")
    assert "--node 'node2'" in err and f"'{socket.gethostname()}'" in err and "one node" in err
    err = refused(tmp_path, "logs", str(run_dir), "--step", "preprocess")
    assert "--step 'preprocess'" in err and "this run has train" in err
    for node in ("0", socket.gethostname()):
        assert run(tmp_path, "logs", str(run_dir), "--node", node).stdout == "iteration 1\n"


# ---- 8. a second launch onto a checkpoint dir a live run writes ---------------------------------------------------
def test_launch_refuses_a_checkpoint_dir_whose_writer_is_alive(tmp_path):
    ckpt = tmp_path / "shared" / "ckpt"
    ckpt.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        other = str(tmp_path / "runs" / "tiny-first")
        (ckpt / ".mtk-writer.json").write_text(json.dumps(
            {"host": socket.gethostname(), "pid": holder.pid, "job_id": "", "run_dir": other, "since": 0}))
        work = tmp_path / "work"
        work.mkdir()
        err = refused(work, "launch", TINY, "--no-megatron-check", "--set", f"train.checkpoint.dir={ckpt}")
        assert "train.checkpoint.dir" in err and f"run {other}" in err and f"pid {holder.pid}" in err
        assert f"mtk cancel {other}" in err and ".mtk-writer.json" in err
    finally:
        holder.kill()
        holder.wait()


def test_a_dead_writers_lease_does_not_block_a_launch(tmp_path):
    """The nodes take over a lease whose holder is provably gone; the launch must not refuse it either."""
    from mtk.launcher.launch_checks import claim_writer

    from mtk.spec import load_job

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / ".mtk-writer.json").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": gone.pid, "job_id": "", "run_dir": "/elsewhere", "since": 0}))
    job = load_job(TINY, [f"train.checkpoint.dir={ckpt}"])
    claim, problems = claim_writer(job, str(tmp_path / "runs" / "new"))
    assert problems == [] and claim is not None
    assert json.loads((ckpt / ".mtk-writer.json").read_text())["run_dir"] == str(tmp_path / "runs" / "new")
    claim.give_back()
    assert not (ckpt / ".mtk-writer.json").exists() and ckpt.is_dir()  # the dir was there before: kept
    (ckpt / ".mtk-writer.json").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "job_id": "", "run_dir": "/elsewhere", "since": 0}))
    claim, problems = claim_writer(job, str(tmp_path / "runs" / "new"))
    assert claim is None and [p.path for p in problems] == ["train.checkpoint.dir"]
    # the same run dir again (a relaunch into it): the nodes treat it as the run's own restart, so does launch
    claim, problems = claim_writer(job, "/elsewhere")
    assert problems == [] and claim is not None
