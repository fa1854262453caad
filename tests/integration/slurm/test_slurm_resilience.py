"""Bad-node exclusion on the real three-node cluster: the batch script's side of the hang watchdog.

The stand-in entrypoint (conftest ``hang`` mode) does what ``mtk-entrypoint train`` does on a hang: the blamed
node's name in ``state/hang.hosts`` and exit 45 on every node. The script must add it to the run's
``state/excluded_nodes`` and restart the run on the other nodes; ``mtk status`` shows the exclusion and why.
"""

from __future__ import annotations

import pytest

from mtk import exitcodes, run_layout

pytestmark = pytest.mark.integration


def stub_sets(stub_venv):
    return [f"cluster.slurm.venv={stub_venv}"]


def test_hang_excludes_the_blamed_node_and_the_restart_avoids_it(harness, stub_venv):
    run = harness.launch(harness.spec("hung"), *stub_sets(stub_venv), env={"MTK_STUB": "hang:1"})
    first = harness.run_record(run)["ids"]["train"]
    rows = harness.wait("the replacement job to complete", lambda: len(r := harness.polled_status(run)) >= 2
                        and r[-1]["state"] == "COMPLETED" and r, timeout=120)
    assert rows[0]["id"] == first and rows[0]["exit_code"] == exitcodes.HANG, rows
    first_nodes = (run / "state" / f"nodes.{first}").read_text().split()
    blamed = first_nodes[1]  # task 1's node
    excluded = (run / run_layout.EXCLUDED_FILE).read_text().splitlines()
    assert [line.split("\t")[0] for line in excluded] == [blamed]
    assert "hang watchdog" in excluded[0]
    second = rows[-1]["id"]
    second_nodes = (run / "state" / f"nodes.{second}").read_text().split()
    assert blamed not in second_nodes and len(second_nodes) == 2, second_nodes
    events = (run / "state" / "events.log").read_text()
    assert f"excluding node {blamed}: the hang watchdog blamed it" in events
    text = harness.mtk("status", str(run)).stdout
    assert "excluded nodes" in text and blamed in text.split("excluded nodes")[1], text


def test_preflight_failure_excludes_the_node_and_training_runs_on_healthy_ones(harness, stub_venv):
    run = harness.launch(harness.spec("gate"), *stub_sets(stub_venv),
                         env={"MTK_STUB": "exit:0", "MTK_STUB_PREFLIGHT": "once:1"})
    first = harness.run_record(run)["ids"]["train"]
    rows = harness.wait("the replacement job to complete", lambda: len(r := harness.polled_status(run)) >= 2
                        and r[-1]["state"] == "COMPLETED" and r, timeout=120)
    assert rows[0]["exit_code"] == exitcodes.PREFLIGHT, rows
    blamed = (run / "state" / f"nodes.{first}").read_text().split()[1]
    log = (run / "logs" / f"train-{first}.out").read_text()
    assert "preflight failed" in log and "args=train" not in log  # the failed gate's job never trained
    second_nodes = (run / "state" / f"nodes.{rows[-1]['id']}").read_text().split()
    assert blamed not in second_nodes and len(second_nodes) == 2
    excluded = (run / run_layout.EXCLUDED_FILE).read_text()
    assert excluded.startswith(f"{blamed}\t") and "preflight" in excluded
    events = (run / "state" / "events.log").read_text()
    assert f"excluding node {blamed}: the preflight blamed it" in events
    assert f"preflight passed on {','.join(second_nodes)}" in events


def test_too_few_healthy_nodes_refuse_the_run_with_the_fix(harness, stub_venv):
    run = harness.launch(harness.spec("gate2"), *stub_sets(stub_venv),
                         env={"MTK_STUB": "exit:0", "MTK_STUB_PREFLIGHT": "fail:1"})
    harness.wait("the refusal", lambda: (run / "state" / "final").exists() and not harness.active_jobs(), timeout=120)
    assert (run / "state" / "final").read_text() == "preflight\n"
    excluded = [line.split("\t")[0] for line in (run / run_layout.EXCLUDED_FILE).read_text().splitlines()]
    assert len(excluded) == 2 and len(set(excluded)) == 2  # one per attempt, then 1 healthy node < 2 needed
    events = (run / "state" / "events.log").read_text()
    assert "refused: only 1 healthy node(s)" in events and "lower cluster.nodes" in events
    assert not list(run.glob("stub-argv.*")), "training must not start on a failed gate"
    harness.wait("the chain to drain", lambda: harness.active_jobs() == [], timeout=60)


def _job_field(harness, job: str, field: str) -> str:
    """One ``Key=value`` of ``scontrol show job`` (MinJobAge keeps ended jobs listed for 10 minutes here)."""
    text = harness.slurm("scontrol", "show", "job", job)
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key == field:
            return value
    raise AssertionError(f"no {field} in scontrol show job {job}:\n{text}")


def test_singleton_successor_gets_the_blamed_node_in_its_exclude_list_and_runs_elsewhere(harness, stub_venv):
    """With cluster.slurm.singleton the restart is the successor already queued (--dependency=singleton) before
    anyone knew which node would hang: the script must put the blamed node into that pending job's ExcNodeList
    (scontrol update), and the successor must then run on the other nodes."""
    spec = harness.spec("single-hang", cluster={"slurm.singleton": True})
    run = harness.launch(spec, *stub_sets(stub_venv), env={"MTK_STUB": "hang:1"})
    first = harness.run_record(run)["ids"]["train"]
    successors = run / "state" / "successors"
    harness.wait("the queued successor", lambda: successors.exists() and successors.read_text().strip(), timeout=60)
    successor = successors.read_text().split()[0]  # queued by the first job at its start, before the hang
    harness.wait("the successor to complete", lambda: _job_field(harness, successor, "JobState") == "COMPLETED",
                 timeout=120)
    blamed = (run / "state" / f"nodes.{first}").read_text().split()[1]  # task 1's node
    assert _job_field(harness, first, "ExitCode") == f"{exitcodes.HANG}:0"
    assert _job_field(harness, successor, "ExcNodeList") == blamed
    ran_on = (run / "state" / f"nodes.{successor}").read_text().split()
    assert blamed not in ran_on and len(ran_on) == 2, ran_on
    first_log = (run / "logs" / f"train-{first}.out").read_text()
    assert f"the queued successor job resumes from checkpoint -1 without {blamed}" in first_log, first_log
    assert "replacement job" not in first_log  # the singleton path, not a new sbatch
    assert [line.split("\t")[0] for line in (run / run_layout.EXCLUDED_FILE).read_text().splitlines()] == [blamed]
    harness.wait("the chain to drain", lambda: harness.active_jobs() == [], timeout=60)
