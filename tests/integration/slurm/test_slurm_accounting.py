"""mtk's ``sacct`` reading against real accounting: the test cluster stores jobs through slurmdbd into MariaDB,
so the output parsed here is Slurm's own, not text written by a test."""

from __future__ import annotations

import os

from mtk.slurm.commands import Slurm


def test_sacct_reads_real_accounting_records(harness, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", harness.env["SLURM_CONF"])
    slurm = Slurm()
    assert slurm.accounting(), "the test cluster has accounting: mtk must see it"

    def submit(*argv: str) -> str:
        out = harness.slurm("sbatch", "--parsable", "-o", os.devnull, *argv)
        return out.strip().split(";")[0]

    ok = submit("--wrap", "true")
    failed = submit("--wrap", "exit 3")
    two_nodes = submit("--nodes=2", "--wrap", "srun hostname")
    cancelled = submit("--wrap", "sleep 600")
    harness.wait("the sleeping job to run", lambda: cancelled in harness.slurm("squeue", "-h", "-t", "R", "-o", "%i"),
                 timeout=300)
    harness.slurm("scancel", cancelled)
    ids = [ok, failed, two_nodes, cancelled]

    def recorded():  # the event: slurmctld has sent every job's end to slurmdbd
        got = slurm.sacct(ids)
        return got if all(i in got and got[i].state not in ("PENDING", "RUNNING") for i in ids) else None

    got = harness.wait("sacct to record all four jobs ended", recorded, timeout=300)
    assert (got[ok].state, got[ok].exit_code, got[ok].source) == ("COMPLETED", 0, "sacct")
    assert (got[failed].state, got[failed].exit_code) == ("FAILED", 3)
    assert got[cancelled].state == "CANCELLED", got[cancelled]  # "CANCELLED by 0" in sacct's own text
    assert got[two_nodes].state == "COMPLETED"
    # The allocation's NodeList as this Slurm (22.05, several slurmd on one host) records it with -X: the batch
    # host only ("node1"; step 0 says node[1-2]). mtk reads it as given: a name of this cluster.
    assert set(slurm.hostnames(got[two_nodes].nodes)) <= {"node1", "node2", "node3"}, got[two_nodes]
    assert slurm.hostnames(got[two_nodes].nodes), got[two_nodes]
