"""The Slurm double the tests and benchmarks/scale_launcher.py share (support.slurm_commands) says what Slurm says:
its host lists are the exact inverse of mtk's expansion of Slurm's, and mtk's own status and logs read a run it
describes as they read one on a cluster."""

from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st
from mtk.launcher.cli import main
from mtk.slurm.environment import expand_nodelist
from support import slurm_commands


@given(st.sets(st.integers(min_value=0, max_value=9999), min_size=1, max_size=60))
def test_the_host_list_is_the_inverse_of_mtks_expansion(numbers):
    ordered = sorted(numbers)
    listed = slurm_commands.nodelist("node", ordered)
    assert expand_nodelist(listed) == [f"node{n:04d}" for n in ordered]


def test_the_allocation_keeps_the_holes_of_excluded_nodes():
    hosts = slurm_commands.allocation(1024)
    assert len(hosts) == 1024 and 3 not in hosts and 13 not in hosts and hosts[-1] == 1024 + 100
    assert slurm_commands.nodelist("node", hosts[:5]) == "node[0001-0002,0004-0006]"
    assert slurm_commands.nodelist("node", [7]) == "node0007"


def test_mtk_reads_a_failed_run_through_the_double(tmp_path, monkeypatch, capsys):
    data = tmp_path / "slurm-data"
    data.mkdir()
    slurm_commands.install(tmp_path / "bin", data)
    run_dir = slurm_commands.failed_train_run(tmp_path, data, 8, 7000, log_lines_per_node=2)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")

    assert main(["status", str(run_dir), "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert [(s["step"], s["state"], s["exit_code"], s["id"]) for s in steps] == [
        ("train", "COMPLETED", 42, "7000"), ("train#2", "COMPLETED", 42, "7001"),
        ("train#3", "COMPLETED", 42, "7002"), ("train#4", "FAILED", 1, "7003")]
    assert "srun: error: node0006: task 4: Exited with exit code 1" in steps[-1]["log_tail"]

    assert main(["logs", str(run_dir), "--node", "node0006"]) == 0  # task 4 of the allocation's host list
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("4: ") for line in lines), lines
    assert "4: RuntimeError: NCCL communicator was aborted on rank 32" in lines
