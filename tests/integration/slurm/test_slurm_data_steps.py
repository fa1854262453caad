"""Data steps on the right nodes, on the real two-node cluster (issue 46 item 3): the preprocess step runs with
``cluster.slurm.data``'s partition, time, CPUs and memory, sharing its node (the node stays MIXED, never whole),
and the chain's training still follows it."""

from __future__ import annotations

import re

import pytest

from .test_slurm_chain import chain_spec, stub_sets

pytestmark = pytest.mark.integration


def _job_fields(harness, job_id: str) -> dict[str, str]:
    text = harness.slurm("scontrol", "show", "job", "--oneliner", job_id)
    return dict(re.findall(r"(\w+)=(\S*)", text))


def test_preprocess_runs_with_the_data_block_on_a_share_of_a_node(harness, stub_venv):
    spec = chain_spec(harness, "datasteps")
    data = ["cluster.slurm.data.partition=debug", "cluster.slurm.data.time=00:07:00",
            "cluster.slurm.data.mem=300M", "cluster.slurm.data.cpus_per_task=1", "data.corpus.workers=null"]
    run = harness.launch(spec, *stub_sets(stub_venv), *data, env={"MTK_STUB": "sleep:20"})
    record = harness.run_record(run)
    script = (run / "preprocess.sbatch").read_text()
    assert "#SBATCH --exclusive" not in script and "#SBATCH --partition=debug" in script

    running = harness.wait_state(run, {"RUNNING"}, step="preprocess", timeout=60)
    assert running["id"] == record["ids"]["preprocess"]
    job = _job_fields(harness, record["ids"]["preprocess"])
    assert job["Partition"] == "debug" and job["TimeLimit"] == "00:07:00"
    assert job["NumCPUs"] == "1" and job["MinMemoryNode"] == "300M"
    assert job["OverSubscribe"] != "NO", "a data step must not hold its node exclusively"
    node = _job_fields(harness, record["ids"]["preprocess"])["NodeList"]
    shown = harness.slurm("scontrol", "show", "node", "--oneliner", node)
    assert "State=MIXED" in shown and "CPUAlloc=1" in shown, shown  # the node's other CPU stays free

    done = harness.wait_state(run, {"COMPLETED"}, timeout=120)
    assert done["exit_code"] == 0
    assert harness.state(run, "preprocess")["state"] == "COMPLETED"
