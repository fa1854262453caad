"""`mtk report --history`: a job's launches (the run dirs sharing its checkpoint dir) read as one timeline, on
synthetic run dirs shaped as `mtk launch` writes them (tests/integration/launcher/test_job_history.py does it on
real runs)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from mtk.launcher.cli import cli
from mtk.launcher.report.history import job_runs
from mtk.launcher.report.records import read_history

from mtk.runs import Run


def _launch(runs: Path, leaf: str, created: float, records: list[dict] | None, *, job: str = "tiny",
            ckpt: str | None = None, launch_error: str = "", last_exit: dict | None = None) -> Path:
    """A run dir as a launch leaves it: run.json, job.json (its checkpoint dir) and, if it trained, metrics."""
    run_dir = runs / leaf
    run_dir.mkdir(parents=True)
    record = {"backend": "local", "run_dir": str(run_dir), "name": job, "created": created}
    if launch_error:
        record["launch_error"] = launch_error
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / "job.json").write_text(json.dumps({"name": job, "train": {
        "log_interval": 1, "checkpoint": {"dir": ckpt or f"{runs}/{job}/checkpoints"}}}))
    if records is not None:
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if last_exit is not None:
        (run_dir / "state").mkdir()
        (run_dir / "state" / "last_exit.json").write_text(json.dumps(last_exit))
    return run_dir


def _job_dirs(runs: Path, synth) -> dict[str, Path]:
    """Job tiny: launch a (1..12, crashed and requeued in place from 10: 11..15), a failed launch, launch b
    (16..20), a relaunch with nothing to do, launch c (21..25); job other beside it, with its own checkpoints."""
    t = synth.train_record
    return {
        "a": _launch(runs, "tiny-1", 1.0, [t(i) for i in range(1, 13)] + [t(i, 1) for i in range(11, 16)]),
        "failed": _launch(runs, "tiny-2", 2.0, None, launch_error="sbatch refused"),
        "b": _launch(runs, "tiny-3", 3.0, [t(i) for i in range(16, 21)] + [synth.eval_record(20)]),
        "noop": _launch(runs, "tiny-4", 4.0, None, last_exit={"code": 0, "iteration": 20,
                                                               "reason": "already complete"}),
        "c": _launch(runs, "tiny-5", 5.0, [t(i) for i in range(21, 26)],
                     last_exit={"code": 0, "iteration": 25, "reason": "done"}),
        "other": _launch(runs, "other-1", 2.5, [t(i) for i in range(1, 4)], job="other"),
    }


def test_read_history_numbers_lines_on_and_marks_every_relaunch(tmp_path, synth):
    t = synth.train_record
    one = synth.write_metrics(tmp_path / "r1", [t(i) for i in range(1, 13)] + [t(i, 1) for i in range(11, 16)])
    two = synth.write_metrics(tmp_path / "r2", [t(i) for i in range(16, 21)])
    three = synth.write_metrics(tmp_path / "r3", [t(i) for i in range(19, 23)])  # resumed before two's end
    m = read_history([("r1", one), ("r2", two), ("r3", three)], 1)
    assert [(r.previous_iteration, r.resume_iteration, r.lost, r.run) for r in m.restarts] == \
        [(12, 10, 2, ""), (15, 15, 0, "r2"), (20, 18, 2, "r3")]
    live, superseded = m.timeline()
    assert [r["iteration"] for r in live] == list(range(1, 23))
    assert sorted(r["iteration"] for r in superseded) == [11, 12, 19, 20]
    assert [(r["run"], r["first_iteration"], r["last_iteration"]) for r in m.runs] == \
        [("r1", 1, 15), ("r2", 16, 20), ("r3", 19, 22)]
    assert [r["_line"] for r in m.train] == list(range(1, len(m.train) + 1))


def test_job_runs_are_the_launches_sharing_the_checkpoint_dir_up_to_the_one_named(tmp_path, synth):
    dirs = _job_dirs(tmp_path, synth)
    newest = Run.load(dirs["c"] / "run.json")
    assert [Path(r.run_dir).name for r in job_runs(newest)] == ["tiny-1", "tiny-3", "tiny-4", "tiny-5"]
    assert [Path(r.run_dir).name for r in job_runs(Run.load(dirs["b"] / "run.json"))] == ["tiny-1", "tiny-3"]
    (dirs["b"] / "job.json").write_text("{")
    assert [Path(r.run_dir).name for r in job_runs(Run.load(dirs["b"] / "run.json"))] == ["tiny-3"]


def test_cli_history_of_a_job_name_reports_every_launch_as_one_timeline(tmp_path, synth):
    dirs = _job_dirs(tmp_path, synth)
    result = CliRunner().invoke(cli, ["report", "--history", "tiny", "--runs-dir", str(tmp_path), "--no-wandb",
                                      "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert [(r["run"], r["first_iteration"], r["last_iteration"]) for r in data["runs"]] == \
        [("tiny-1", 1, 15), ("tiny-3", 16, 20), ("tiny-4", None, None), ("tiny-5", 21, 25)]
    assert (data["final_iteration"], data["restarts"], data["iterations_lost"]) == (25, 3, 2)
    assert (data["final_eval_iteration"], data["ended"]) == (20, "COMPLETED at iteration 25")
    assert "tiny-4 logged no train iteration: trained nothing: its checkpoint was already at iteration 20" in \
        data["notes"]
    assert (dirs["c"] / "report-history" / "loss.png").is_file() and not (dirs["c"] / "report").exists()
    text = CliRunner().invoke(cli, ["report", "--history", str(dirs["c"]), "--no-wandb", "--no-plots"]).output
    assert "history of job tiny: 4 launch(es), oldest first" in text
    assert "tiny-4 (no train records: trained nothing: its checkpoint was already at iteration 20)" in text


def test_cli_history_refuses_several_runs_and_says_when_none_trained(tmp_path, synth):
    dirs = _job_dirs(tmp_path, synth)
    two = CliRunner().invoke(cli, ["report", "--history", str(dirs["a"]), str(dirs["b"])])
    assert two.exit_code == 2 and "--history reports one job; 2 RUNs were given" in two.output
    lone = _launch(tmp_path, "empty-1", 9.0, None, job="empty")
    none = CliRunner().invoke(cli, ["report", "--history", str(lone), "--no-wandb"])
    assert none.exit_code == 1 and "no launch of job empty has logged a train iteration" in none.output


def test_report_of_a_job_name_without_history_names_the_option(tmp_path, synth):
    _job_dirs(tmp_path, synth)
    result = CliRunner().invoke(cli, ["report", "tiny", "--runs-dir", str(tmp_path), "--no-wandb", "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "note: job tiny has 4 launches; `mtk report --history tiny` reports them as one timeline" in result.output
    assert "report for " + str(tmp_path / "tiny-5") in result.output
