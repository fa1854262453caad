"""The pre-flight health gate for real: two `mtk-entrypoint preflight` processes (one per "node") join one gloo
group and check an all-reduce; a test-only hook (a sitecustomize this test writes, not in the package) corrupts
the result on node 1, and a path that cannot be a directory stands for a broken mount."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.ports import free_port

from mtk import exitcodes
from mtk.spec.loader import apply_overrides, validate

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]

BAD_ALLREDUCE_HOOK = """\
# Test-only: node 1's all-reduce returns a wrong sum (what a flaky link or bad memory would do).
import os

if os.environ.get("RANK") == "1":
    import torch.distributed as _dist

    _original = _dist.all_reduce

    def _corrupt(tensor, *args, **kwargs):
        work = _original(tensor, *args, **kwargs)
        tensor.add_(1)
        return work

    _dist.all_reduce = _corrupt
"""


def write_job(tmp: Path, *sets: str) -> Path:
    data = apply_overrides(yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text()),
                           [f"cluster.runs_dir={tmp / 'runs'}", f"data.dir={tmp / 'data'}",
                            "resilience.preflight.allreduce_mb=4", *sets])
    path = tmp / "run" / "job.json"
    path.parent.mkdir(parents=True)
    path.write_text(validate(data).to_json())
    return path


def run_nodes(job: Path, extra_env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = {**os.environ, **extra_env, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "-m", "mtk.launcher.entrypoint", "preflight", "--job",
                                       str(job)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        outs.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    return outs


def test_healthy_nodes_pass_with_a_bandwidth_figure(tmp_path):
    job = write_job(tmp_path)
    outs = run_nodes(job, {})
    assert [o.returncode for o in outs] == [0, 0], outs[0].stdout[-2000:]
    result = json.loads((job.parent / "state" / "preflight.json").read_text())
    assert result["ok"] and result["failed_hosts"] == []
    assert all(n["allreduce_ok"] and n["busbw_gbps"] > 0 for n in result["nodes"])
    assert "2/2 node(s) healthy" in outs[0].stdout


def test_a_corrupting_node_is_named_on_every_node(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BAD_ALLREDUCE_HOOK)
    job = write_job(tmp_path)
    outs = run_nodes(job, {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))})
    assert [o.returncode for o in outs] == [exitcodes.PREFLIGHT] * 2, outs[1].stdout[-2000:]
    result = json.loads((job.parent / "state" / "preflight.json").read_text())
    assert [(f["node_rank"], f["host"]) for f in result["failed"]] == [(1, socket.gethostname())]
    assert "all-reduce returned" in result["failed"][0]["problems"][0]
    assert (job.parent / "state" / "preflight.hosts").read_text() == f"{socket.gethostname()}\n"
    assert all("(node 1) FAILED: all-reduce returned" in o.stdout for o in outs)


def test_a_broken_mount_fails_the_node_with_the_fix(tmp_path):
    (tmp_path / "not-a-dir").write_text("a file where a mount point should be\n")
    job = write_job(tmp_path, f"train.checkpoint.dir={tmp_path / 'not-a-dir' / 'ckpt'}")
    outs = run_nodes(job, {})
    assert [o.returncode for o in outs] == [exitcodes.PREFLIGHT] * 2
    result = json.loads((job.parent / "state" / "preflight.json").read_text())
    assert [f["node_rank"] for f in result["failed"]] == [0, 1]
    problem = result["failed"][0]["problems"][0]
    assert problem.startswith("storage: train.checkpoint.dir") and "check the mount" in problem
