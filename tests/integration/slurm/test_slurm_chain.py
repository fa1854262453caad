"""The batch scripts' own behaviour on the real two-node cluster, with a stand-in ``mtk-entrypoint`` (from
a venv the script activates on every node) so each case takes seconds: chain states, logs -f, cancel,
failures, sbatch rejections, the Pyxis preflight, hostile paths, requeue on USR2, guardrail, singleton."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HOSTILE_LEAF = "run $(touch CANARY) `x` ;'q\" #&"


def chain_spec(harness, name: str, **changes):
    """The tiny-slurm example with preprocess + train; the corpus/vocab files only need to exist."""
    data = harness.root / "data"
    data.mkdir(exist_ok=True)
    for f in ("corpus.jsonl", "vocab.json", "merges.txt"):
        (data / f).write_text("{}\n")
    return harness.spec(name, mock=False, data={"dir": str(data)}, **changes)


def stub_sets(stub_venv: Path) -> list[str]:
    return [f"cluster.slurm.venv={stub_venv}"]


def test_cluster_nodes_have_their_own_hostnames(harness):
    script = harness.root / "hosts.sh"
    script.write_text("#!/bin/bash\nsrun -l hostname\n")
    out = harness.root / "hosts.out"
    job = harness.slurm("sbatch", "--parsable", "-N2", "--ntasks-per-node=1", f"--output={out}", str(script))
    harness.wait("the hostname job", lambda: "COMPLETED" in harness.slurm("squeue", "-h", "--states=all",
                                                                            f"--jobs={job.strip()}", "-o", "%T"))
    assert sorted(out.read_text().split()) == ["0:", "1:", "node1", "node2"]


def test_chain_states_logs_follow_and_completion(harness, stub_venv):
    spec = chain_spec(harness, "chain")
    run = harness.launch(spec, *stub_sets(stub_venv), env={"MTK_STUB": "tick:6"})
    record = harness.run_record(run)
    assert list(record["ids"]) == ["preprocess", "train"]

    first = harness.wait_state(run, {"RUNNING"}, step="preprocess", timeout=60)
    train = harness.state(run, "train")
    assert first["id"] == record["ids"]["preprocess"]
    assert train["state"] == "PENDING" and "Dependency" in train["reason"]

    follow = harness.mtk("logs", str(run), "-f", "--step", "preprocess")  # returns when the job ends
    lines = follow.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("0: tick")] == [f"0: tick {i}" for i in range(1, 7)]

    harness.wait_state(run, {"RUNNING"}, timeout=60)
    done = harness.wait_state(run, {"COMPLETED"}, timeout=60)
    assert done["exit_code"] == 0
    assert harness.state(run, "preprocess")["state"] == "COMPLETED"
    log = (run / "logs" / f"train-{record['ids']['train']}.out").read_text()
    assert "0: node=node1 task=0" in log and "1: node=node2 task=1" in log
    assert harness.mtk("logs", str(run), "--node", "node2").stdout.splitlines()[0].startswith("1: node=node2")
    args = (run / "stub-argv.1").read_bytes().split(b"\0")[:-1]
    assert [a.decode() for a in args] == ["train", "--job", f"{run}/job.json", "--run-dir", str(run)]


def test_cancel_leaves_nothing_running(harness, stub_venv):
    run = harness.launch(chain_spec(harness, "cancel"), *stub_sets(stub_venv), env={"MTK_STUB": "sleep:300"})
    harness.wait_state(run, {"RUNNING"}, step="preprocess", timeout=60)
    harness.wait("the stand-in to start", lambda: (run / "stub-argv.0").exists(), timeout=60)
    assert harness.processes_of(run)
    harness.mtk("cancel", str(run))
    assert harness.active_jobs() == []
    states = {s["step"]: s["state"] for s in harness.status(run)}
    assert states == {"preprocess": "CANCELLED", "train": "CANCELLED"}
    harness.wait("the job's processes to end", lambda: not harness.processes_of(run), timeout=30)
    harness.mtk("cancel", str(run))  # safe to repeat


def test_failing_step_cancels_dependents_and_status_says_why(harness, stub_venv):
    run = harness.launch(chain_spec(harness, "fails"), *stub_sets(stub_venv), env={"MTK_STUB": "exit:3"})
    failed = harness.wait_state(run, {"FAILED"}, step="preprocess", timeout=60)
    assert failed["exit_code"] == 3
    assert failed["log_tail"][-1] == "srun: error: node1: task 0: Exited with exit code 3"
    train = harness.wait_state(run, {"CANCELLED"}, timeout=30)
    assert "step before it failed" in train["reason"]
    text = harness.mtk("status", str(run)).stdout
    assert "exit=3" in text and "Exited with exit code 3" in text


def test_sbatch_rejection_names_the_spec_field(harness, stub_venv):
    spec = harness.spec("rejected")
    out = harness.mtk("launch", str(spec), "--backend", "slurm", "--set", "cluster.slurm.partition=bogus",
                      "--set", f"cluster.slurm.venv={stub_venv}", check=False)
    assert out.returncode == 2
    assert "cluster.slurm.partition" in out.stderr and "Invalid partition name specified" in out.stderr
    assert harness.active_jobs() == []


def test_a_rejected_sbatch_is_recorded_as_a_failed_launch_and_never_the_default_run(harness, stub_venv):
    out = harness.mtk("launch", str(harness.spec("rejected")), "--backend", "slurm", "--set",
                      "cluster.slurm.partition=bogus", "--set", f"cluster.slurm.venv={stub_venv}", check=False)
    assert out.returncode == 2, out.stderr
    [run] = (harness.root / "runs").glob("rejected-*")  # render wrote the run dir before sbatch refused
    record = json.loads((run / "run.json").read_text())
    assert record["ids"] == {} and "Invalid partition name specified" in record["launch_error"], record
    [row] = json.loads(harness.mtk("ls", "--json").stdout)
    assert (row["name"], row["state"]) == (run.name, "FAILED") and "the launch failed" in row["reason"], row
    [step] = json.loads(harness.mtk("status", run.name, "--json").stdout)
    assert (step["step"], step["state"]) == ("launch", "FAILED") and "nothing was submitted" in step["reason"]
    for verb in ("status", "logs", "cancel"):  # no RUN: a failed launch is never "the newest run"
        bare = harness.mtk(verb, check=False)
        assert bare.returncode == 2 and "Traceback" not in bare.stderr, bare.stderr
        assert f"{run.name}: its launch failed (" in bare.stderr, bare.stderr
    assert "nothing to cancel" in harness.mtk("cancel", run.name).stdout


def test_pyxis_preflight_fails_fast_on_a_node_without_pyxis(harness):
    # This cluster's real srun has no Pyxis plugin, so no stand-in srun is needed: the rendered pyxis script
    # must stop before launching anything and say what to do.
    image = harness.root / "img.sqsh"  # an image that exists: launch and the script's sqsh check let it through
    image.write_bytes(b"hsqs")
    spec = harness.spec("pyxis", cluster={"slurm.runtime": "pyxis", "slurm.container_image": str(image)})
    run = harness.launch(spec)
    failed = harness.wait_state(run, {"FAILED"}, timeout=60)
    assert failed["exit_code"] == 2
    message = "has no --container-image option: the Pyxis plugin is not installed"
    assert any(message in line for line in failed["log_tail"])
    assert "cluster.slurm.runtime: bare" in "\n".join(failed["log_tail"])


def test_hostile_run_dir_and_sbatch_values_reach_slurm_verbatim(harness, stub_venv):
    run_dir = harness.root / "runs" / HOSTILE_LEAF
    comment = 'it\'s "q" \\ #hash $(touch CANARY) %j'
    spec = harness.spec("hostile", cluster={"slurm.extra_sbatch": {"comment": comment}})
    out = harness.mtk("launch", str(spec), "--backend", "slurm", "--run-dir", str(run_dir),
                      "--set", f"cluster.slurm.venv={stub_venv}", env={"MTK_STUB": "exit:0"})
    job_id = out.stdout.split("train: ")[1].split()[0]
    harness.wait_state(run_dir, {"COMPLETED"}, timeout=60)
    shown = harness.slurm("scontrol", "show", "job", job_id)
    assert f"Comment={comment}" in shown
    assert f"StdOut={run_dir}/logs/train-{job_id}.out" in shown
    args = [a.decode() for a in (run_dir / "stub-argv.0").read_bytes().split(b"\0")[:-1]]
    assert args == ["train", "--job", f"{run_dir}/job.json", "--run-dir", str(run_dir)]
    assert not list(harness.root.rglob("CANARY")) and not Path("CANARY").exists()


def test_usr2_is_forwarded_to_every_node_and_the_job_requeued(harness, stub_venv):
    run = harness.launch(harness.spec("usr2"), *stub_sets(stub_venv), env={"MTK_STUB": "usr2:42"})
    job = harness.run_record(run)["ids"]["train"]
    harness.wait("both nodes to wait for USR2", lambda: all((run / f"stub-argv.{i}").exists() for i in (0, 1)))
    harness.slurm("scancel", "--signal=USR2", "--batch", job)
    # The requeued job waits for its BeginTime (~cred_expire, 5 s here): starting it earlier with
    # `scontrol update starttime=now` gets it killed with "Job credential revoked".
    harness.wait("the requeue", lambda: "restart=1" in (run / "logs" / f"train-{job}.out").read_text(), timeout=90)
    log = (run / "logs" / f"train-{job}.out").read_text()
    assert "0: task 0 got USR2" in log and "1: task 1 got USR2" in log
    assert "requeueing job" in log and f"train: job {job}, restart 1" in log
    events = (run / "state" / "events.log").read_text()
    assert "signal USR2" in events and "saved checkpoint=-1 on a signal; restarting" in events
    assert "restarts=1" in harness.state(run)["reason"]


def test_guardrail_stops_a_run_that_keeps_failing(harness, stub_venv):
    run = harness.launch(harness.spec("guard", cluster={"slurm.max_failures": 2}), *stub_sets(stub_venv),
                         env={"MTK_STUB": "exit:1"})
    final = harness.wait("the guardrail", lambda: (s := harness.state(run, polled=True))["state"] == "FAILED" and s,
                         timeout=120)
    assert final["exit_code"] == 44
    assert "guardrail: 2 failures in a row without checkpoint progress" in final["reason"]
    assert "restarts=1" in final["reason"]
    assert (run / "state" / "final").read_text() == "guardrail\n"
    assert harness.active_jobs() == []


def test_exit_code_43_stops_cleanly_and_cancels_the_queued_successor(harness, stub_venv):
    spec = harness.spec("stop", cluster={"slurm.singleton": True})
    run = harness.launch(spec, *stub_sets(stub_venv), env={"MTK_STUB": "exit:43"})
    done = harness.wait_state(run, {"STOPPED"}, timeout=60)  # the job exits 0 (not requeued); mtk calls it STOPPED
    assert "stopped by the exit trigger" in done["reason"] and done["exit_code"] == 0
    rows = harness.status(run)
    assert [r["state"] for r in rows[1:]] == ["CANCELLED"], rows  # the singleton successor
    assert not rows[1]["needed"] and "not needed: the run was stopped" in rows[1]["reason"], rows
    assert (run / "state" / "final").read_text() == "stopped\n"
    assert harness.active_jobs() == []
    [row] = [r for r in json.loads(harness.mtk("ls", "--json").stdout) if r["run_dir"] == str(run)]
    assert row["state"] == "STOPPED" and "not needed" not in row["reason"], row


def test_singleton_keeps_one_successor_queued(harness, stub_venv):
    run = harness.launch(harness.spec("single", cluster={"slurm.singleton": True}), *stub_sets(stub_venv),
                         env={"MTK_STUB": "sleep:8"})
    rows = harness.wait("a queued successor", lambda: len(r := harness.polled_status(run)) == 2 and r, timeout=60)
    assert rows[0]["state"] == "RUNNING" and rows[1]["state"] == "PENDING"
    assert "Dependency" in rows[1]["reason"]
    # A crash would let the successor start and resume; a completed run cancels it instead.
    rows = harness.wait("the run to end", lambda: (r := harness.polled_status(run))[0]["state"] == "COMPLETED"
                        and r[1]["state"] == "CANCELLED" and r, timeout=90)
    assert "not needed: the run completed" in rows[1]["reason"] and not rows[1]["needed"]
    [row] = [r for r in json.loads(harness.mtk("ls", "--json").stdout) if r["run_dir"] == str(run)]
    assert row["state"] == "COMPLETED", row  # the cancelled successor was not needed: not a cancelled run


def test_singleton_successor_resumes_after_a_crash(harness, stub_venv):
    spec = harness.spec("single2", cluster={"slurm.singleton": True, "slurm.max_failures": 5})
    run = harness.launch(spec, *stub_sets(stub_venv), env={"MTK_STUB": "exit:1"})
    first = harness.run_record(run)["ids"]["train"]
    rows = harness.wait("the successor to run", lambda: len(r := harness.polled_status(run)) >= 2
                        and r[1]["state"] in ("RUNNING", "FAILED") and r, timeout=90)
    assert rows[0]["state"] == "FAILED" and rows[0]["id"] == first
    log = (run / "logs" / f"train-{first}.out").read_text()
    assert "the queued successor job resumes" in log and "requeueing" not in log
    harness.mtk("cancel", str(run))


def test_status_reports_restart_count_and_job_ids(harness, stub_venv):
    run = harness.launch(harness.spec("plain"), *stub_sets(stub_venv), env={"MTK_STUB": "exit:0"})
    row = harness.wait_state(run, {"COMPLETED"}, timeout=60)
    assert row["id"] == harness.run_record(run)["ids"]["train"] and row["exit_code"] == 0
