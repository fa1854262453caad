"""`mtk-entrypoint doctor` on this machine: real torch and megatron.core on CPU, GPU expectations failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def run_doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from mtk.launcher.entrypoint import main; "
                           "sys.exit(main(sys.argv[1:]))", "doctor", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_cpu_preflight_passes_here_and_reports_versions():
    proc = run_doctor("--device", "cpu", "--json")
    report = json.loads(proc.stdout)
    status = {c["name"]: c for c in report["checks"]}
    import torch

    assert proc.returncode == 0 and report["ok"] is True
    assert status["torch"]["status"] == "ok" and status["torch"]["detail"] == torch.__version__
    assert status["megatron.core"]["status"] == "ok" and status["megatron.core"]["detail"].startswith("0.")
    assert status["cuda"]["status"] == status["nccl"]["status"] == status["efa"]["status"] == "skip"


def test_gpu_expectations_fail_with_fixes_on_this_cpu_machine(tmp_path):
    job = tmp_path / "job.json"
    from mtk.spec import load_job

    spec = load_job(REPO / "examples" / "tiny.yaml", ["cluster.device=gpu", "cluster.instance_type=p5.48xlarge",
                                                       "cluster.procs_per_node=8"])
    job.write_text(spec.to_json())
    proc = run_doctor("--job", str(job), "--run-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "device=gpu, expected EFA devices=32" in proc.stdout
    for name in ("cuda", "nccl-net-plugin", "libfabric", "efa"):
        assert any(line.split()[:2] == ["FAIL", name] for line in proc.stdout.splitlines()), name
    assert "-> install aws-ofi-nccl" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].startswith("FAILED:")
