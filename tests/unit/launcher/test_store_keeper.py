"""Two nodes' real torchrun agents (c10d rendezvous, gloo): the store's host keeps it up until the other has left.

The second node is held at the exit barrier until the host has left it (``tests/support/late_exit_barrier.py``):
without the keeper the host's process exits and takes the store down, and that node logs a traceback after a run
that succeeded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mtk.launcher.store_keeper import store_place
from support.ports import free_ports

SUPPORT = Path(__file__).resolve().parents[2] / "support"


def _torchrun_args(port: int, node_rank: int, script: Path) -> list[str]:
    return ["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node_rank), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "keeper", "--max-restarts", "0", str(script)]


def _listening(port: int, proc: subprocess.Popen) -> None:
    while proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the host exited before its store listened: {proc.communicate()}")


@pytest.mark.timeout(300)
def test_the_host_keeps_the_store_until_the_late_node_has_left(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "dist.barrier()\ndist.destroy_process_group()\n")
    (port,) = free_ports(1)
    host = subprocess.Popen([sys.executable, "-m", "mtk.launcher.quiet_torchrun", *_torchrun_args(port, 0, script)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _listening(port, host)
    late_node = [sys.executable, str(SUPPORT / "late_exit_barrier.py"), *_torchrun_args(port, 1, script)]
    late = subprocess.run(late_node, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "STORE_HOST_PID": str(host.pid)})
    host_out, _ = host.communicate(timeout=60)
    late_out = late.stdout + late.stderr
    assert host.returncode == 0, host_out
    assert late.returncode == 0, late_out
    assert "Traceback" not in late_out and "failed to shutdown the rendezvous" not in late_out, late_out


def test_where_the_store_is_follows_torchruns_rules():
    c10d = store_place(["--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1234", "x.py"])
    assert (c10d.host, c10d.port, c10d.nodes, c10d.hosts_here) == ("127.0.0.1", 1234, 4, True)
    told = store_place(["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1234",
                        "--rdzv-conf", "is_host=false", "x.py"])
    assert told.hosts_here is False
    static = store_place(["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500",
                          "x.py"])
    assert (static.host, static.port, static.hosts_here) == ("10.0.0.1", 29500, False)
    assert store_place(["--standalone", "--nproc-per-node", "2", "x.py"]) is None
    assert store_place(["--nnodes", "2", "--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e:2379", "x.py"]) is None
