"""A relaunch on EKS avoids the nodes earlier attempts of the run excluded (``state/excluded_nodes`` on FSx).

Through the real ``mtk`` CLI against the API-server stand-in: the run's recorded exclusions (the target run dir's
and those of earlier runs that train into the same checkpoint dir) are merged after the spec's own
``cluster.exclude_nodes`` into the PyTorchJob's required node anti-affinity, the launch says so, the manifest
validates against the operator's CRD and ``kubernetes-validate --strict``, and ``mtk status`` lists the nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mtk.k8s import yamlio
from support.k8s_schema import pytorchjob_validator

from mtk import run_layout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SPEC_NODE = "ip-10-0-0-9.ec2.internal"
HUNG_NODE = "ip-10-0-0-2.ec2.internal"  # excluded by the run being relaunched
EARLIER_NODE = "ip-10-0-0-3.ec2.internal"  # excluded by an earlier run of the same checkpoints
OTHER_NODE = "ip-10-0-0-4.ec2.internal"  # excluded by an unrelated run (other checkpoints): not inherited


def _mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.cli", *args], cwd=cwd, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=180)


def _earlier_run(runs: Path, name: str, ckpt: str, host: str) -> None:
    """What an earlier attempt leaves on FSx: its job.json and the exclusion its watchdog recorded."""
    (runs / name / "state").mkdir(parents=True)
    (runs / name / run_layout.JOB_FILE).write_text(json.dumps({"name": "tiny", "train": {"checkpoint": {"dir": ckpt}}}))
    (runs / name / run_layout.EXCLUDED_FILE).write_text(
        f"{host}\t2026-11-22T01:02:03Z\thang watchdog (pod {name}-worker-1): stopped reporting progress\n")


def test_relaunch_renders_recorded_exclusions_as_node_anti_affinity_and_status_lists_them(standin, tmp_path):
    standin.state.ready_after = 1
    fsx = tmp_path / "fsx"
    runs = fsx / "runs"
    sets = ["--set", "image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com", "--set", "cluster.nodes=2",
            "--set", "cluster.procs_per_node=1", "--set", f"cluster.runs_dir={runs}", "--set", f"data.dir={fsx}/data",
            "--set", f"cluster.eks.fsx_mount={fsx}", "--set", f"cluster.exclude_nodes=[{SPEC_NODE}]",
            "--set", "cluster.eks.operator=pytorchjob"]  # the stand-in serves Trainer too; a TrainJob's pod is the same
    ckpt = f"{runs}/tiny/checkpoints"  # the default: every run of job `tiny` resumes from it
    run_dir = runs / "tiny-20261122-020304"
    _earlier_run(runs, run_dir.name, ckpt, HUNG_NODE)
    _earlier_run(runs, "tiny-20261121-000000", ckpt, EARLIER_NODE)
    _earlier_run(runs, "other-20261121-000000", f"{runs}/other/checkpoints", OTHER_NODE)

    out = _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--run-dir", str(run_dir),
               "--no-megatron-check", *sets, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "avoiding 2 node(s) earlier attempts of this run excluded" in out.stderr, out.stderr
    assert f"{HUNG_NODE} (excluded 2026-11-22T01:02:03Z: hang watchdog" in out.stderr
    assert OTHER_NODE not in out.stderr

    local = tmp_path / "runs" / run_dir.name
    ptj = next(o for o in yamlio.load_all((local / "manifests" / "all.yaml").read_text()) if o["kind"] == "PyTorchJob")
    pod = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                         "values": [SPEC_NODE, HUNG_NODE, EARLIER_NODE]}]
    # The object the API server received is the rendered one.
    applied = next(r for r in standin.state.requests if r.method == "PATCH" and r.kind == "PyTorchJob")
    assert HUNG_NODE in json.dumps(applied.body) and OTHER_NODE not in json.dumps(applied.body)
    # The job spec the pods read carries the merged list too (the watchdog's blame and this launch agree).
    assert json.loads((local / "job.json").read_text())["cluster"]["exclude_nodes"] == [SPEC_NODE, HUNG_NODE,
                                                                                       EARLIER_NODE]
    errors = sorted(e.message for e in pytorchjob_validator().iter_errors(ptj))
    assert not errors, errors
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"},
                "template": ptj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]}
    (tmp_path / "worker.yaml").write_text(yaml.safe_dump(template))
    check = subprocess.run([os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"), "--strict",
                            "--quiet", str(tmp_path / "worker.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    status = _mtk("status", str(local), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    listed = status.stdout.split("excluded nodes")[1]
    assert HUNG_NODE in listed and "hang watchdog" in listed, status.stdout


def test_a_damaged_exclusion_record_is_refused_with_the_file_and_line(tmp_path):
    fsx = tmp_path / "fsx"
    runs = fsx / "runs"
    run_dir = runs / "tiny-20261122-020304"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / run_layout.EXCLUDED_FILE).write_text("node-a\tt\tok\n$(reboot)\tt\tbad\n")
    out = _mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--run-dir", str(run_dir),
               "--dry-run", "--no-megatron-check", "--set", f"cluster.runs_dir={runs}", "--set", f"data.dir={fsx}/data",
               "--set", f"cluster.eks.fsx_mount={fsx}",
               "--set", "image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{run_dir / run_layout.EXCLUDED_FILE}:2: '$(reboot)' is not a node name" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists(), "nothing rendered"
