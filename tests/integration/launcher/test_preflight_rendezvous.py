"""The preflight's all-reduce across pods on EKS, for real: two `mtk-entrypoint preflight` processes (two "pods")
learn their ranks from a real etcd through torch's etcd-v2 rendezvous — the variables the rendered init container
carries, no RANK/MASTER_ADDR — join one gloo group and check it; a pod that comes alone gives up after the
timeout and its own checks decide."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from mtk.launcher import preflight
from support.ports import free_port

from .test_preflight import write_job

pytestmark = pytest.mark.integration


@pytest.fixture
def etcd(tmp_path):
    assert shutil.which("etcd"), "install the Debian package etcd-server"
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(["etcd", "--enable-v2", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{client}",
                             "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{client}/v2/keys/", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "etcd did not start"
            time.sleep(0.2)
    yield f"127.0.0.1:{client}"
    proc.kill()
    proc.wait(timeout=30)


def pod_env(endpoint: str, nodes: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "MTK_PREFLIGHT_RDZV": endpoint, "MTK_PREFLIGHT_RDZV_ID": "run-1-preflight",
            "MTK_PREFLIGHT_NODES": str(nodes), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_pods_find_their_ranks_in_etcd_and_check_an_allreduce_across_them(tmp_path, etcd):
    job = write_job(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "mtk.launcher.entrypoint", "preflight", "--job", str(job)],
                              env=pod_env(etcd, 2), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    result = json.loads((job.parent / "state" / "preflight.json").read_text())
    assert result["ok"] and sorted(n["node_rank"] for n in result["nodes"]) == [0, 1]
    assert all(n["allreduce_ok"] and n["busbw_gbps"] > 0 for n in result["nodes"])
    assert any("2/2 node(s) healthy" in o for o in outs)


def test_a_pod_alone_gives_up_waiting_and_its_own_checks_decide(tmp_path, etcd, monkeypatch):
    monkeypatch.setattr(preflight, "INIT_TIMEOUT_S", 3)
    assert preflight.join_by_rendezvous(etcd, "alone-preflight", 2) is None


def test_c10d_pods_find_their_ranks_at_worker_0s_store_and_a_pod_alone_gives_up(tmp_path, monkeypatch):
    """cluster.eks.rendezvous: c10d — no etcd: the pod whose address the endpoint names hosts the store (here
    loopback, so the first to bind hosts it and the other connects, torch's own fallback), both join one gloo
    group; a pod alone gives up after the timeout."""
    job = write_job(tmp_path)
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**pod_env(endpoint, 2), "MTK_PREFLIGHT_RDZV_BACKEND": "c10d"}
    procs = [subprocess.Popen([sys.executable, "-m", "mtk.launcher.entrypoint", "preflight", "--job", str(job)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    result = json.loads((job.parent / "state" / "preflight.json").read_text())
    assert result["ok"] and sorted(n["node_rank"] for n in result["nodes"]) == [0, 1]
    assert all(n["allreduce_ok"] for n in result["nodes"])
    monkeypatch.setattr(preflight, "INIT_TIMEOUT_S", 3)
    assert preflight.join_by_rendezvous(f"127.0.0.1:{free_port()}", "alone-preflight", 2, "c10d") is None
