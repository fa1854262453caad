"""The checkpoint-dir lease: a second writer is refused by name; a dead or restarted owner is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from mtk.training import lease


def test_second_writer_is_refused_naming_the_first(tmp_path):
    first = lease.acquire(tmp_path / "ckpt", "/runs/tiny-a")
    with pytest.raises(lease.LeaseHeld) as err:
        lease.acquire(tmp_path / "ckpt", "/runs/tiny-b")
    text = str(err.value)
    assert "/runs/tiny-a" in text and f"pid {first['pid']}" in text and socket.gethostname() in text
    assert str(tmp_path / "ckpt" / lease.LEASE) in text  # the fix names the file
    lease.release(tmp_path / "ckpt", first)
    assert not (tmp_path / "ckpt" / lease.LEASE).exists()
    lease.release(tmp_path / "ckpt", lease.acquire(tmp_path / "ckpt", "/runs/tiny-b"))  # free again


def test_a_dead_owner_on_this_host_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / lease.LEASE).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout),
                                                "run_dir": "/runs/crashed", "since": 0}))
    me = lease.acquire(root, "/runs/next")
    assert json.loads((root / lease.LEASE).read_text())["run_dir"] == "/runs/next"
    lease.release(root, me)


def test_the_same_run_restarted_elsewhere_takes_its_lease_back(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / lease.LEASE).write_text(json.dumps({"host": "node7", "pid": 1, "job_id": "41", "run_dir": "/runs/r1"}))
    me = lease.acquire(root, "/runs/r1")  # a requeued/successor job of the same run (Slurm runs them one at a time)
    owner = json.loads((root / lease.LEASE).read_text())
    assert owner == me and (owner["host"], owner["pid"]) == (socket.gethostname(), os.getpid()), owner
    lease.release(root, me)


def test_a_live_owner_on_another_host_is_refused(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / lease.LEASE).write_text(json.dumps({"host": "node7", "pid": 1, "job_id": "41", "run_dir": "/runs/r1"}))
    with pytest.raises(lease.LeaseHeld, match=r"host node7, pid 1, job 41"):
        lease.acquire(root, "/runs/r2")
