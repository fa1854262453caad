"""The user's path, through the real `mtk` CLI in a subprocess: launch --backend eks, status, logs, cancel,
against the API-server STAND-IN (a recording HTTP server on 127.0.0.1; no real API server runs here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
EKS_SET = ["--set", "image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com",
           "--set", "cluster.nodes=2", "--set", "cluster.procs_per_node=1"]


def _mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.cli", *args], cwd=cwd, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=180)


def test_launch_status_logs_cancel_through_the_cli(standin, kube_token, tmp_path):
    """On a cluster with the Training Operator v1 only (AWS's reference set-up), cluster.eks.operator: auto (the
    default) launches a PyTorchJob; tests/journeys/test_j5_trainjob.py walks the same verbs on Kubeflow Trainer."""
    standin.state.ready_after = 1  # ready at the first read: the CLI's 5 s poll never sleeps
    standin.state.missing_plurals |= {"trainjobs", "trainingruntimes", "jobsets"}
    fsx = tmp_path / "fsx"
    sets = [*EKS_SET, "--set", f"cluster.runs_dir={fsx}/runs", "--set", f"data.dir={fsx}/data",
            "--set", f"cluster.eks.fsx_mount={fsx}"]
    run_dir = fsx / "runs" / "tiny-20261122-020304"
    out = _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--run-dir", str(run_dir),
               *sets, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "train: PyTorchJob/tiny-20261122-020304" in out.stdout
    # The run dir is a pod path; the launching machine keeps the files and run.json under ./runs/<run>.
    local = tmp_path / "runs" / run_dir.name
    assert f"run: {local}" in out.stdout
    assert not run_dir.exists(), "the launcher wrote into the pods' FSx path"
    record = json.loads((local / "run.json").read_text())
    assert record["backend"] == "eks" and record["extra"]["run_id"] == "tiny-20261122-020304"
    kinds = [r.kind for r in standin.state.requests if r.method == "PATCH"]
    # The default c10d rendezvous: no etcd to run; the NetworkPolicy keeps other pods off worker 0's store.
    assert kinds == ["ConfigMap", "NetworkPolicy", "Service", "PyTorchJob"]
    assert "cluster.eks.operator auto: the cluster serves Training Operator v1 only, so a PyTorchJob" in out.stderr

    status = _mtk("status", run_dir.name, "--json", cwd=tmp_path)  # by run name, from ./runs
    assert status.returncode == 0, status.stderr
    steps = {(s["step"], s["id"]): s["state"] for s in json.loads(status.stdout)}
    assert steps[("train", "PyTorchJob/tiny-20261122-020304")] == "RUNNING"
    assert steps[("train", "pod/tiny-20261122-020304-worker-1")] == "RUNNING"

    logs = _mtk("logs", str(local), "--node", "worker-1", cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [f"tiny-20261122-020304-worker-1: line {n}" for n in (1, 2, 3)]
    cancel = _mtk("cancel", str(local), cwd=tmp_path)  # repeating it: test_k8s_apply
    assert cancel.returncode == 0, cancel.stderr
    assert not standin.state.objects
    assert kube_token not in "".join(p.read_text() for p in local.rglob("*") if p.is_file())


def test_unreachable_cluster_is_one_clear_line(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n"
                          "    server: http://127.0.0.1:9\nusers:\n- name: u\n  user: {}\n"
                          "contexts:\n- name: c\n  context: {cluster: gone, user: u}\ncurrent-context: c\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    fsx = tmp_path / "fsx"
    out = _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--run-dir",
               str(fsx / "runs" / "tiny-x"), *EKS_SET, "--set", f"cluster.runs_dir={fsx}/runs",
               "--set", f"data.dir={fsx}/data", "--set", f"cluster.eks.fsx_mount={fsx}", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr  # set-up, not a failed run
    # Besides the megatron-core check's one line on where its verdict came from (ran now, or the cache a test
    # before left), stderr is the one error line: no traceback, no retry noise.
    lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("megatron-core check: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "127.0.0.1:9" in lines[0] and str(kubeconfig) in lines[0] and "KUBECONFIG" in lines[0]
    assert not (tmp_path / "runs").exists(), "a launch that reached no cluster left a run record"
