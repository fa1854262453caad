"""A Slurm launch that reaches no controller (issue #37): one line saying which controller was looked up where and
how to point elsewhere, exit 2, and no run dir written — nothing claims a submission. Slurm's real client
commands run against a slurm.conf naming a controller that does not answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed-multinode.yaml"


def test_a_launch_with_no_controller_names_slurm_conf_and_writes_no_run(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=gone(127.0.0.1)\nSlurmctldPort=9\n"
                    "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = subprocess.run([sys.executable, "-m", "mtk", "launch", str(SEED), "--no-megatron-check"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no Slurm controller answers (`scontrol ping`" in errors[0]
    assert f"SLURM_CONF={conf}" in errors[0] and "Point SLURM_CONF at" in errors[0]
    assert not (tmp_path / "runs").exists()
