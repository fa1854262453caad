"""Parsing Slurm's answers (captured from the real 22.05 cluster), the state table, sbatch rejections mapped
to spec fields, and status/logs/cancel of the backend over a scripted Slurm client."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mtk.slurm import logfiles
from mtk.slurm.backend import STATES, SlurmBackend, neutral
from mtk.slurm.commands import (
    JobInfo,
    SlurmError,
    SubmitRejected,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
    parse_submit,
)

from mtk.runs import Run

# Captured from `squeue -h --states=all -j 2,4,5,3 -o '%i|%T|%r|%N'` and `scontrol show job -o 4`.
SQUEUE = """2|CANCELLED|None|node[1-2]
4|CANCELLED|DependencyNeverSatisfied|
5|COMPLETED|None|node1
3|FAILED|NonZeroExitCode|node1
"""
SCONTROL = ("JobId=4 JobName=my run-train UserId=root(0) GroupId=root(0) JobState=CANCELLED "
            "Reason=DependencyNeverSatisfied Dependency=afterok:3(failed) Requeue=1 Restarts=2 BatchFlag=1 "
            "ExitCode=3:0 RunTime=00:00:00 NodeList=node[1-2] Command=/tmp/a b/ok.sh WorkDir=/tmp "
            "StdErr=/tmp/a b/ok-4.out StdIn=/dev/null StdOut=/tmp/a b/ok-4.out Power=")


def done(rc: int, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], rc, out, err)


def test_parse_squeue_and_scontrol():
    jobs = parse_squeue(SQUEUE)
    assert jobs["4"].state == "CANCELLED" and jobs["4"].reason == "DependencyNeverSatisfied"
    assert jobs["2"].reason == "" and jobs["2"].nodes == "node[1-2]"
    rec = parse_scontrol(SCONTROL)["4"]
    assert rec.exit_code == 3 and rec.signal == 0 and rec.restarts == 2
    assert rec.stdout == "/tmp/a b/ok-4.out" and rec.nodes == "node[1-2]"


def _array(*tasks: tuple[str, int, str, str]) -> str:
    """scontrol records of array 7's tasks (JobId, ArrayTaskId, JobState, ExitCode), as Slurm prints them."""
    return "".join(f"JobId={jid} ArrayJobId=7 ArrayTaskId={i} JobName=p JobState={st} Reason=None ExitCode={ec} "
                   f"NodeList=node1 StdOut=/r/logs/preprocess-7_{i}.out\n" for jid, i, st, ec in tasks)


def test_a_job_array_is_its_tasks_together_not_the_task_under_its_id():
    """Slurm keeps one task under the array's own id (here the last one): the step's state is all of them."""
    failed = parse_scontrol(_array(("8", 0, "COMPLETED", "0:0"), ("9", 1, "FAILED", "1:0"), ("7", 2, "COMPLETED",
                                                                                              "0:0")))
    assert failed["7"].state == "FAILED" and failed["7"].exit_code == 1
    assert failed["7"].stdout == "/r/logs/preprocess-7_1.out", "the failing task's log"
    assert failed["9"].state == "FAILED" and failed["8"].state == "COMPLETED", "each task kept as itself"
    running = parse_scontrol(_array(("8", 0, "COMPLETED", "0:0"), ("9", 1, "RUNNING", "0:0"),
                                    ("7", "2-3", "PENDING", "0:0")))
    assert running["7"].state == "RUNNING" and running["7"].exit_code is None
    done = parse_scontrol(_array(("8", 0, "COMPLETED", "0:0"), ("7", 1, "COMPLETED", "0:0")))
    assert done["7"].state == "COMPLETED" and done["7"].stdout == "/r/logs/preprocess-7_1.out"


def test_parse_sacct():
    jobs = parse_sacct("12|CANCELLED by 0|0:15|node1\n13|COMPLETED|0:0|node[1-2]\n13.batch|COMPLETED|0:0|node1\n")
    assert jobs["12"].state == "CANCELLED" and jobs["12"].signal == 15
    assert jobs["13"].exit_code == 0 and set(jobs) == {"12", "13"}


def test_state_table_and_unknown_fallback():
    assert neutral("PENDING") == "PENDING" and neutral("COMPLETING") == "RUNNING"
    assert neutral("TIMEOUT") == "FAILED" and neutral("CANCELLED+") == "CANCELLED"
    assert neutral("SOMETHING_NEW") == "UNKNOWN" and neutral("") == "UNKNOWN"
    assert set(STATES.values()) == {"PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"}


@pytest.mark.parametrize(("err", "field"), [
    ("sbatch: error: invalid partition specified: bogus\nsbatch: error: Batch job submission failed: "
     "Invalid partition name specified", "cluster.slurm.partition"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "cluster.slurm.account"),
    ("sbatch: error: Invalid --time specification", "cluster.slurm.time"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "cluster.slurm.time"),
    ("sbatch: error: Invalid generic resource (gres) specification", "cluster.procs_per_node"),
    ("sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: "
     "Requested node configuration is not available", "cluster.slurm.mem"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification", "cluster.slurm.qos"),
])
def test_sbatch_rejections_name_the_field(err, field):
    with pytest.raises(SubmitRejected) as exc:
        parse_submit(done(1, err=err), {"cluster.slurm.partition": "bogus"})
    problem = exc.value.problems[0]
    assert problem.path == field
    assert err.splitlines()[-1].split("error: ")[-1] in problem.message


def test_sbatch_success_and_unmapped_failure():
    assert parse_submit(done(0, "123\n")) == "123" and parse_submit(done(0, "77;cluster2\n")) == "77"
    with pytest.raises(SlurmError, match="Unable to contact"):
        parse_submit(done(1, err="sbatch: error: Batch job submission failed: Unable to contact slurm controller"))


class FakeSlurm:
    """Answers like the real client; records what was asked."""

    def __init__(self, squeue=None, scontrol=None, sacct=None):
        self._squeue, self._scontrol, self._sacct = squeue or {}, scontrol or {}, sacct or {}
        self.cancelled: list[tuple[list[str], list[str]]] = []

    def squeue(self, ids):
        return {i: self._squeue[i] for i in ids if i in self._squeue}

    def scontrol(self, ids):
        return {i: self._scontrol[i] for i in ids if i in self._scontrol}

    def sacct(self, ids):
        return {i: self._sacct[i] for i in ids if i in self._sacct}

    def cancel(self, ids=(), names=()):
        self.cancelled.append((list(ids), list(names)))
        for i in ids:
            if i in self._squeue:
                self._squeue[i].state = "CANCELLED"


def make_run(tmp_path: Path, ids: dict[str, str]) -> Run:
    (tmp_path / "logs").mkdir()
    (tmp_path / "state").mkdir()
    return Run(backend="slurm", run_dir=str(tmp_path), name="t", ids=ids,
               extra={"job_names": {s: f"r-{s}" for s in ids}})


def test_status_failed_step_shows_exit_code_and_failing_node_tail(tmp_path):
    run = make_run(tmp_path, {"preprocess": "10", "train": "11"})
    (tmp_path / "logs" / "preprocess-10.out").write_text(
        "[mtk] preprocess: job 10\n0: reading corpus\n0: Traceback ...\n0: ValueError: bad line 3\n"
        "srun: error: node1: task 0: Exited with exit code 1\n")
    fake = FakeSlurm(squeue={"10": JobInfo("10", "FAILED", "NonZeroExitCode"),
                             "11": JobInfo("11", "CANCELLED", "DependencyNeverSatisfied")},
                     scontrol={"10": JobInfo("10", "FAILED", "NonZeroExitCode", exit_code=1)})
    rows = {s.step: s for s in SlurmBackend(fake).status(run)}
    assert rows["preprocess"].state == "FAILED" and rows["preprocess"].exit_code == 1
    assert rows["preprocess"].log_tail[-2:] == ["0: ValueError: bad line 3",
                                                "srun: error: node1: task 0: Exited with exit code 1"]
    assert rows["train"].state == "CANCELLED" and "step before it failed" in rows["train"].reason


def test_status_falls_back_to_sacct_then_exit_files_then_unknown(tmp_path):
    run = make_run(tmp_path, {"getdata": "1", "preprocess": "2", "train": "3"})
    (tmp_path / "state" / "preprocess.2.exit").write_text("0\n")
    fake = FakeSlurm(sacct={"1": JobInfo("1", "COMPLETED", exit_code=0)})
    rows = {s.step: s for s in SlurmBackend(fake).status(run)}
    assert rows["getdata"].state == "COMPLETED"
    assert rows["preprocess"].state == "COMPLETED" and rows["preprocess"].exit_code == 0
    assert rows["train"].state == "UNKNOWN"


def test_status_explains_guardrail_and_requeues(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "events.log").write_text(
        "2026-01-01T00:00:00Z train 5 restart=0 start nodes=node1,node2\n"
        "2026-01-01T00:00:09Z train 5 restart=1 guardrail: 2 failures in a row without checkpoint progress "
        "(last exit=1, checkpoint=-1); not restarted\n")
    (tmp_path / "state" / "final").write_text("guardrail\n")
    (tmp_path / "logs" / "train-5.out").write_text("0: boom\n1: boom\nsrun: error: node2: task 1: Exited with "
                                                   "exit code 1\n")
    fake = FakeSlurm(scontrol={"5": JobInfo("5", "FAILED", "NonZeroExitCode", exit_code=44, restarts=1)})
    (row,) = SlurmBackend(fake).status(run)
    assert row.state == "FAILED" and row.exit_code == 44
    assert "guardrail: 2 failures in a row" in row.reason and "restarts=1" in row.reason
    assert row.log_tail == ["1: boom", "srun: error: node2: task 1: Exited with exit code 1"]


def test_status_lists_singleton_successors(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "successors").write_text("6\n")
    fake = FakeSlurm(squeue={"5": JobInfo("5", "RUNNING"), "6": JobInfo("6", "PENDING", "Dependency")})
    rows = SlurmBackend(fake).status(run)
    assert [(r.step, r.state, r.reason) for r in rows] == [("train", "RUNNING", ""),
                                                           ("train#2", "PENDING", "waiting: Dependency")]


def test_cancel_is_repeatable_and_marks_the_run(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "successors").write_text("6\n")
    fake = FakeSlurm(squeue={"5": JobInfo("5", "RUNNING"), "6": JobInfo("6", "PENDING")})
    backend = SlurmBackend(fake)
    backend.cancel(run, wait=5)
    backend.cancel(run, wait=5)
    assert fake.cancelled[0] == (["5", "6"], ["r-train"]) and len(fake.cancelled) == 2
    assert (tmp_path / "state" / "final").read_text() == "cancelled\n"


def test_logs_filter_by_node_name_or_number(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "nodes.5").write_text("node1 node2\n")
    (tmp_path / "logs" / "train-5.out").write_text("[mtk] start\n0: a\n1: b\n 1: c\n")
    backend = SlurmBackend(FakeSlurm())
    assert list(backend.logs(run)) == ["[mtk] start\n", "0: a\n", "1: b\n", " 1: c\n"]
    assert list(backend.logs(run, node="node2")) == ["1: b\n", " 1: c\n"]
    assert list(backend.logs(run, node="0")) == ["0: a\n"]
    with pytest.raises(ValueError, match=r"0 \(node1\), 1 \(node2\)"):
        list(backend.logs(run, node="node9"))


def test_follow_streams_until_the_job_ends(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    log = tmp_path / "logs" / "train-5.out"
    log.write_text("0: one\n0: tw")
    fake = FakeSlurm(squeue={"5": JobInfo("5", "RUNNING")})
    stream = SlurmBackend(fake).logs(run, follow=True)
    assert next(stream) == "0: one\n"
    with open(log, "a") as fh:
        fh.write("o\n0: three")
    assert next(stream) == "0: two\n"
    fake._squeue["5"].state = "COMPLETED"
    assert list(stream) == ["0: three"]


def test_tail_keeps_split_utf8_characters_whole(tmp_path):
    path = tmp_path / "f"
    data = "0: é\n".encode()
    path.write_bytes(data[:4])
    tail = logfiles.Tail(path)
    assert tail.read() == []
    path.write_bytes(data)
    assert tail.read() == ["0: é\n"]


def _ended_chain(tmp_path: Path, final: str, event: str) -> list:
    """A preprocess, a train job that handed over to its successor (6), the successor that ended the run, and the
    successor queued after it (7), which the script cancelled because the run had ended."""
    run = make_run(tmp_path, {"preprocess": "4", "train": "5"})
    (tmp_path / "state" / "successors").write_text("6\n7\n")
    (tmp_path / "state" / "final").write_text(f"{final}\n")
    (tmp_path / "state" / "events.log").write_text(
        "2026-01-01T00:00:00Z train 5 restart=0 saved checkpoint=4 on a signal; restarting\n"
        f"2026-01-01T00:00:09Z train 6 restart=0 {event}\n")
    fake = FakeSlurm(scontrol={"4": JobInfo("4", "COMPLETED", exit_code=0), "5": JobInfo("5", "COMPLETED", exit_code=0),
                               "6": JobInfo("6", "COMPLETED", exit_code=0), "7": JobInfo("7", "CANCELLED")})
    return SlurmBackend(fake).status(run)


def test_a_stopped_run_is_stopped_and_its_cancelled_successor_not_needed(tmp_path):
    from mtk.launcher.runtable import fold_steps

    rows = {s.step: s for s in _ended_chain(tmp_path, "stopped", "stopped by the exit trigger checkpoint=9")}
    assert [rows[s].state for s in ("preprocess", "train", "train#2")] == ["COMPLETED", "COMPLETED", "STOPPED"]
    assert rows["train#2"].exit_code == 0 and "stopped by the exit trigger" in rows["train#2"].reason
    assert rows["train#3"].state == "CANCELLED" and not rows["train#3"].needed
    assert "not needed: the run was stopped" in rows["train#3"].reason
    assert fold_steps(list(rows.values())) == "STOPPED"


def test_a_completed_run_whose_successor_was_cancelled_as_not_needed_is_completed(tmp_path):
    from mtk.launcher.runtable import fold_steps

    rows = _ended_chain(tmp_path, "completed", "completed checkpoint=10")
    assert [(r.step, r.state, r.needed) for r in rows] == [
        ("preprocess", "COMPLETED", True), ("train", "COMPLETED", True), ("train#2", "COMPLETED", True),
        ("train#3", "CANCELLED", False)]
    assert "not needed: the run completed" in rows[-1].reason
    assert fold_steps(rows) == "COMPLETED"


def test_a_stop_without_an_event_marks_the_last_completed_train_job(tmp_path):
    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "final").write_text("stopped\n")
    (tmp_path / "state" / "train.5.exit").write_text("0\n")  # Slurm has forgotten the job: the exit file answers
    (row,) = SlurmBackend(FakeSlurm()).status(run)
    assert row.state == "STOPPED" and row.exit_code == 0


def test_a_cancelled_run_stays_cancelled(tmp_path):
    from mtk.launcher.runtable import fold_steps

    run = make_run(tmp_path, {"train": "5"})
    (tmp_path / "state" / "successors").write_text("6\n")
    (tmp_path / "state" / "final").write_text("cancelled\n")
    fake = FakeSlurm(scontrol={"5": JobInfo("5", "CANCELLED"), "6": JobInfo("6", "CANCELLED")})
    rows = SlurmBackend(fake).status(run)
    assert all(r.needed for r in rows) and fold_steps(rows) == "CANCELLED"
