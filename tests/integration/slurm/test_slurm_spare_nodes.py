"""Spare nodes on the real three-node cluster: ``cluster.nodes: "2:3"`` asks Slurm for 2 to 3 nodes; a node that
fails the pre-flight health gate is excluded and the job trains at once, in the same allocation, on the healthy
rest, with the world size (and DP, micro-batches per step) derived from that node count and the global batch kept.

The failing node is injected by a test-only hook (a sitecustomize this test writes, not in the package): on the
host named by MTK_TEST_SICK_NODE the preflight's node checks report a read-only mount.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from mtk import run_layout

pytestmark = pytest.mark.integration

SICK_NODE_HOOK = """\
# Test-only (written by test_slurm_spare_nodes.py): this node's preflight reports a broken mount.
import os
import socket

if os.environ.get("MTK_TEST_SICK_NODE"):
    from mtk.launcher import preflight as _preflight

    _node_checks = _preflight.node_checks

    def _sick_node_checks(job, run_dir):
        health = _node_checks(job, run_dir)
        if socket.gethostname() == os.environ["MTK_TEST_SICK_NODE"]:
            health.problems.append("storage: run dir is not writable (injected by the test: read-only mount)")
        return health

    _preflight.node_checks = _sick_node_checks
"""
ITERS = 4
GLOBAL_BATCH = 12  # divisible by micro batch 2 × DP for DP 2 and 3: every count in 2:3 keeps it


def _idle_nodes(harness) -> int:
    return harness.slurm("sinfo", "-h", "-N", "-o", "%t").split().count("idle")


def test_a_node_failing_preflight_is_dropped_and_the_job_trains_on_the_two_healthy_ones(harness, mtk_venv,
                                                                                         read_metrics):
    hook = harness.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SICK_NODE_HOOK)
    sick = "node1"  # the first node: the rendezvous store must move to the first healthy one
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
           "MTK_TEST_SICK_NODE": sick}
    spec = harness.spec("spare", cluster={"nodes": "2:3"}, parallel={"tp": 1},
                        train={"iterations": ITERS, "global_batch_size": GLOBAL_BATCH, "micro_batch_size": 2,
                               "checkpoint.save_interval": None, "eval_interval": None, "lr_warmup_iters": 1})
    harness.wait("three idle nodes", lambda: _idle_nodes(harness) == 3, timeout=60)
    run = harness.launch(spec, f"cluster.slurm.venv={mtk_venv}", env=env)
    sbatch = (run / "train.sbatch").read_text()
    assert "#SBATCH --nodes=2-3\n" in sbatch and "--ntasks-per-node" not in sbatch.split("\n\n")[0]
    job = harness.run_record(run)["ids"]["train"]
    done = harness.wait_state(run, {"COMPLETED"}, timeout=900)
    assert done["exit_code"] == 0 and done["id"] == job, done
    assert [r["id"] for r in harness.status(run) if r["step"] == "train"] == [job], "no restart: same allocation"

    allocated = (run / "state" / f"nodes.{job}").read_text().split()
    assert allocated == ["node1", "node2", "node3"], "the spare was allocated"
    preflight = json.loads((run / "state" / "preflight.json").read_text())
    assert preflight["failed_hosts"] == [sick] and "read-only mount" in preflight["failed"][0]["problems"][0]
    excluded = (run / run_layout.EXCLUDED_FILE).read_text().splitlines()
    assert [line.split("\t")[0] for line in excluded] == [sick] and "preflight" in excluded[0]
    events = (run / "state" / "events.log").read_text()
    assert "training on 2 node(s) node2,node3 (spare nodes, at least 2)" in events, events

    log = (run / "logs" / f"train-{job}.out").read_text()
    assert "rendezvous: static, store on node2:" in log, log
    trained_on = {line.split(": mtk: node ")[1].split()[0] for line in log.splitlines() if ": mtk: node " in line
                  and " restart " in line}
    assert trained_on == {"node2", "node3"}, log
    # World size from the healthy nodes: DP 2 (tp 1, one process per node), global batch 12 kept → 3 micro-batches.
    assert "dp=2;" in log and f"training iterations 1..{ITERS}, 3 micro-batches per step" in log, log
    fixed = json.loads((run / "state" / "job.2nodes.json").read_text())["cluster"]
    assert fixed["nodes"] == 2 and fixed["min_nodes"] is None
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("kind") == "train"]
    assert [r["iteration"] for r in train] == list(range(1, ITERS + 1))
    assert all(r["global_batch_size"] == GLOBAL_BATCH and r["consumed_samples"] == GLOBAL_BATCH * r["iteration"]
               for r in train), train


def _log_of(run, harness) -> str:
    job = harness.run_record(run)["ids"]["train"]
    return (run / "logs" / f"train-{job}.out").read_text()


def test_a_relaunch_on_fewer_healthy_nodes_resumes_the_checkpoint_with_a_smaller_dp(harness, mtk_venv):
    """The same job twice (same checkpoint dir): first on all three nodes (DP 3), then with node3 failing the
    preflight on two (DP 2), resuming the distributed optimizer's checkpoint at 4 with the global batch kept."""
    hook = harness.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SICK_NODE_HOOK)
    pythonpath = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    train = {"global_batch_size": GLOBAL_BATCH, "micro_batch_size": 2, "checkpoint.save_interval": 4,
             "eval_interval": None, "lr_warmup_iters": 1}
    sets = [f"cluster.slurm.venv={mtk_venv}"]

    def launch(iterations: int, env: dict):
        spec = harness.spec("spare2", cluster={"nodes": "2:3"}, parallel={"tp": 1, "distributed_optimizer": True},
                            train={**train, "iterations": iterations})
        harness.wait("three idle nodes", lambda: _idle_nodes(harness) == 3, timeout=60)
        run = harness.launch(spec, *sets, env={"PYTHONPATH": pythonpath, **env})
        done = harness.wait_state(run, {"COMPLETED"}, timeout=900)
        assert done["exit_code"] == 0, done
        return run

    first = launch(4, {})
    log = _log_of(first, harness)
    assert "dp=3;" in log and "training iterations 1..4, 2 micro-batches per step" in log, log
    second = launch(8, {"MTK_TEST_SICK_NODE": "node3"})
    log = _log_of(second, harness)
    assert "training on 2 node(s) node1,node2" in (second / "state" / "events.log").read_text()
    assert "[checkpoint] resumed from" in log and "at iteration 4," in log, log
    assert "dp=2;" in log and "training iterations 5..8, 3 micro-batches per step" in log, log
    before = [json.loads(line) for line in (first / "metrics.jsonl").read_text().splitlines()]
    after = [json.loads(line) for line in (second / "metrics.jsonl").read_text().splitlines()]
    before = [r for r in before if r.get("kind") == "train"]
    after = [r for r in after if r.get("kind") == "train"]
    assert [r["iteration"] for r in after] == [5, 6, 7, 8]
    assert all(r["consumed_samples"] == GLOBAL_BATCH * r["iteration"] for r in before + after)
    assert all(math.isfinite(r["lm_loss"]) for r in before + after), (before, after)
