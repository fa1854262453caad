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


# ---- taken atomically: of many takers at once exactly one wins (issue 44, item 3) -------------------------------
RACE = """
import json, os, sys, time
from pathlib import Path
from mtk.training import lease
root, go, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
while not go.exists():
    time.sleep(0.001)
try:
    lease.claim(root, me) if sys.argv[4] == "claim" else lease.acquire(root, me)
except lease.LeaseHeld as exc:
    print(json.dumps({"refused": str(exc), "holder": exc.holder.get("run_dir")}))
else:
    print(json.dumps({"won": me}))
    sys.stdout.flush()
    sys.stdin.read()  # hold the lease until the test has looked
"""


def _race(tmp_path, n: int, how: str) -> tuple[list[str], list[dict], str]:
    """``n`` real processes released together by a file; returns (winners, refusals, the lease's run_dir)."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / "ckpt"), str(go), f"/runs/r{i}", how],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(n)]
    go.touch()
    results = [json.loads(p.stdout.readline()) for p in procs]
    holder = json.loads((tmp_path / "ckpt" / lease.LEASE).read_text())["run_dir"]
    for p in procs:
        p.communicate("")
    return [r["won"] for r in results if "won" in r], [r for r in results if "refused" in r], holder


@pytest.mark.parametrize("how", ["claim", "acquire"])
def test_of_many_takers_at_once_exactly_one_holds_the_lease(tmp_path, how):
    winners, refusals, holder = _race(tmp_path, 6, how)
    assert winners == [holder], (winners, refusals)
    assert len(refusals) == 5 and all(r["holder"] == holder and f"run {holder}" in r["refused"] for r in refusals)


def test_of_many_takers_of_a_dead_runs_lease_exactly_one_wins(tmp_path):
    """Every taker judges the lease stale; the takeover replaces only the lease it judged, so one wins."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / lease.LEASE).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout),
                                                             "run_dir": "/runs/crashed", "since": 0}))
    winners, refusals, holder = _race(tmp_path, 6, "acquire")
    assert winners == [holder] and holder != "/runs/crashed" and len(refusals) == 5, (winners, refusals)
    assert list((tmp_path / "ckpt").iterdir()) == []  # the winner gave it back at exit; no temp file, no lock left


def test_a_launch_claim_is_handed_to_the_run_and_taken_over_by_its_rank_0(tmp_path):
    root = tmp_path / "ckpt"
    mine = lease.claim(root, "/runs/r1")
    assert mine["claim"] == "launch" and mine["pid"] == os.getpid()
    runner = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert lease.hand_over(root, mine, pid=runner.pid)
        handed = json.loads((root / lease.LEASE).read_text())
        assert handed["pid"] == runner.pid and handed["run_dir"] == "/runs/r1"
        with pytest.raises(lease.LeaseHeld, match=f"pid {runner.pid}"):  # the runner lives: another run is refused
            lease.claim(root, "/runs/r2")
        rank0 = lease.acquire(root, "/runs/r1")  # the run's own rank 0 takes its claim over
        assert json.loads((root / lease.LEASE).read_text()) == rank0
        assert not lease.hand_over(root, mine, pid=1)  # no longer the launch's claim: left alone
        lease.release(root, rank0)
    finally:
        runner.communicate(b"")
    assert not (root / lease.LEASE).exists()


def test_a_claim_handed_to_a_queued_job_is_judged_by_its_scheduler_not_the_launchers_pid(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claim = {"host": socket.gethostname(), "pid": int(gone.stdout), "job_id": "4242", "scheduler": "slurm",
             "run_dir": "/runs/queued", "since": 0, "claim": "launch"}
    (root / lease.LEASE).write_text(json.dumps(claim))
    # the launching process is gone; Slurm cannot say (no squeue here), so the job counts as queued: refused
    with pytest.raises(lease.LeaseHeld, match="job 4242"):
        lease.claim(root, "/runs/other")


def test_a_zombie_holds_nothing(tmp_path):
    """A killed run's process that nobody reaped (its parent gone, an init that does not reap) is not alive: its
    lease is taken over, as a dead pid's is; a live process of this host keeps its own."""
    import time

    from mtk.processes import state

    root = tmp_path / "ckpt"
    root.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.time() + 60  # only fails a hung test
        while state(child.pid) != "Z":
            assert time.time() < deadline, "the child never exited"
            time.sleep(0.05)
        (root / lease.LEASE).write_text(json.dumps({"host": socket.gethostname(), "pid": child.pid,
                                                    "run_dir": "/runs/killed", "since": 0}))
        me = lease.claim(root, "/runs/next")
        assert json.loads((root / lease.LEASE).read_text())["run_dir"] == "/runs/next"
        with pytest.raises(lease.LeaseHeld, match=f"pid {os.getpid()}"):  # this process lives: refused
            lease.claim(root, "/runs/third")
        lease.release(root, me)
    finally:
        child.wait()
