"""The checkpoint-interval advice (mtk/goodput.py) follows what the job's earlier runs recorded.

Run dirs are laid out as a launch makes them (``<runs_dir>/<name>-<stamp>/job.json``) with the records the engine
writes: ``state/checkpoint_saves.jsonl`` (CheckpointManager._record's lines) and ``metrics.jsonl`` train records.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

from mtk import goodput
from mtk.spec.loader import apply_overrides, validate

REPO = Path(__file__).resolve().parents[3]
SLURM = REPO / "examples" / "gpt-7.5b-p5-slurm.yaml"


def _job(runs: Path, *sets: str):
    data = yaml.safe_load(SLURM.read_text())
    return validate(apply_overrides(data, [f"cluster.runs_dir={runs}", "cluster.nodes=64",
                                           "train.global_batch_size=512", *sets]))


def _earlier_run(job, stamp: str, save_s: list[float], step_ms: float) -> Path:
    run_dir = Path(job.cluster.runs_dir) / f"{job.name}-{stamp}"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "job.json").write_text(job.to_json())
    lines = [{"iteration": 100 * (i + 1), "plan_s": 0.2, "validated": i == 0, "ranks": 512, "mode": "sync",
              "write_s": s - 0.3, "publish_s": 0.1, "blocking_s": s, "time": 1.0} for i, s in enumerate(save_s)]
    (run_dir / goodput.SAVES_FILE).write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"kind": "train", "iteration": i, "step_time_ms": step_ms}) + "\n" for i in range(1, 4)))
    return run_dir


def test_the_interval_follows_the_recorded_save_cost(tmp_path):
    cheap, dear = tmp_path / "cheap", tmp_path / "dear"
    job_cheap, job_dear = _job(cheap), _job(dear)
    # each run's first save (it alone checks the sharding) is left out: 60 s there must not count
    _earlier_run(job_cheap, "20260101-000000", [60.0, 4.0, 4.0, 4.0], step_ms=2000)
    _earlier_run(job_dear, "20260101-000000", [60.0, 64.0, 64.0], step_ms=2000)
    a, b = goodput.plan(job_cheap), goodput.plan(job_dear)
    assert a.save.seconds == 4.0 and b.save.seconds == 64.0
    assert f"recorded by {job_cheap.name}-20260101-000000" in a.save.source
    assert a.step_s == 2.0 and a.job_mtbf_s == b.job_mtbf_s == goodput.DEFAULT_NODE_MTBF_HOURS * 3600 / 64
    assert math.isclose(b.interval_s / a.interval_s, 4.0)  # √(64 / 4): Young/Daly
    assert math.isclose(a.interval_s, math.sqrt(2 * 4.0 * a.job_mtbf_s))
    assert b.interval_iterations == round(b.interval_s / 2.0)
    assert a.goodput(a.interval_s) > b.goodput(b.interval_s)


def test_the_newest_run_of_the_same_job_counts_and_others_do_not(tmp_path):
    job = _job(tmp_path)
    _earlier_run(job, "20260101-000000", [9.0, 9.0], step_ms=1000)
    _earlier_run(job, "20260102-000000", [1.0, 25.0], step_ms=1000)
    other = _job(tmp_path, f"name={job.name}-big")  # a longer name sharing the prefix: not this job
    _earlier_run(other, "20260103-000000", [500.0, 500.0], step_ms=1000)
    p = goodput.plan(job)
    assert sorted(goodput.recorded(job)[0]) == [9.0, 25.0]
    assert p.save.seconds == 17.0 and "20260102-000000" in p.save.source


def test_without_records_the_estimate_is_named(tmp_path):
    p = goodput.plan(_job(tmp_path))
    assert p.save.source.startswith("estimated:") and p.step_source.startswith("estimated")


def test_a_save_interval_far_from_the_advice_says_the_goodput_it_loses(tmp_path):
    job = _job(tmp_path, "train.checkpoint.save_interval=20")
    _earlier_run(job, "20260101-000000", [30.0, 30.0], step_ms=2000)
    p = goodput.plan(job)
    last = p.lines()[-1]
    assert f"set it to {p.interval_iterations:,}" in last and "saving too often" in last, last
    lost = p.goodput(p.interval_s) - p.goodput(20 * 2.0)
    assert f"{lost:.1%} of the run lost" in last
    near = _job(tmp_path / "near", f"train.checkpoint.save_interval={p.interval_iterations}")
    _earlier_run(near, "20260101-000000", [30.0, 30.0], step_ms=2000)
    assert "set it to" not in goodput.plan(near).lines()[-1]


def test_validate_prints_the_interval_from_the_recorded_cost(tmp_path):
    job = _job(tmp_path)
    _earlier_run(job, "20260101-000000", [16.0, 16.0], step_ms=1000)
    out = subprocess.run([sys.executable, "-m", "mtk", "validate", str(SLURM), "-q", "--no-megatron",
                          "--set", f"cluster.runs_dir={tmp_path}", "--set", "cluster.nodes=64",
                          "--set", "train.global_batch_size=512"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    p = goodput.plan(job)
    assert f"checkpoint interval:     {p.interval_iterations:,} iterations" in out.stdout, out.stdout
    assert "save 16.0 s" in out.stdout and "at 64 node(s)" in out.stdout
    assert "goodput:" in out.stdout


def test_the_restart_includes_the_first_saves_sharding_check_at_the_jobs_size(tmp_path):
    """With assume_constant_structure (the default) the check runs on the first save of every attempt: a restart
    cost, growing with the job's ranks (benchmarks/scale_checkpoint.py's law); without it, every save pays it."""
    small = goodput.plan(_job(tmp_path / "a", "cluster.nodes=64", "train.global_batch_size=512"))
    large = goodput.plan(_job(tmp_path / "b", "cluster.nodes=512", "train.global_batch_size=4096"))
    check_small = small.restart.phases["first_save_check"]
    check_large = large.restart.phases["first_save_check"]
    assert check_large > 7 * check_small > 0, (check_small, check_large)
    assert "scale_checkpoint" in large.restart.sources["first_save_check"]
    assert "first_save_check" in large.lines()[1]
    tensors = goodput.tensors_per_rank(_job(tmp_path / "b", "cluster.nodes=512", "train.global_batch_size=4096"))
    assert math.isclose(check_large, goodput.CHECK_BASE_S + goodput.CHECK_S_PER_RANK_TENSOR * 4096 * tensors)
    # scale_checkpoint's own layout at 1,024 nodes lands where benchmarks/README.md puts it (10-25 s)
    assert 20 < goodput.CHECK_BASE_S + goodput.CHECK_S_PER_RANK_TENSOR * 8192 * goodput.CHECK_TENSORS < 26

    every_save = goodput.plan(_job(tmp_path / "c", "cluster.nodes=512", "train.global_batch_size=4096",
                                   "train.checkpoint.assume_constant_structure=false"))
    assert "first_save_check" not in every_save.restart.phases
    assert math.isclose(every_save.save.seconds - large.save.seconds, check_large)
    assert "sharding check" in every_save.save.source


def test_the_first_save_check_the_job_recorded_at_its_size_wins_over_the_estimate(tmp_path):
    job = _job(tmp_path)  # 64 nodes x 8 = 512 ranks, as _earlier_run records them
    _earlier_run(job, "20260101-000000", [60.0, 4.0, 4.0], step_ms=1000)
    p = goodput.plan(job)
    assert p.restart.phases["first_save_check"] == 56.0
    assert "recorded by" in p.restart.sources["first_save_check"]
    other_size = _job(tmp_path, "cluster.nodes=128", "train.global_batch_size=1024")  # 1,024 ranks: not recorded
    assert "estimated" in goodput.plan(other_size).restart.sources["first_save_check"]


def test_the_readme_example_is_told_one_save_at_the_end_suffices(tmp_path):
    """The README's minimal spec (2 nodes, 5,000 iterations, save_interval 500) through `mtk validate`: the
    Young/Daly interval is longer than the run, so the advice is one save at the end — never an interval longer
    than the run."""
    readme = (REPO / "README.md").read_text()
    spec = readme.split("## A minimal spec", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "spec.yaml").write_text(spec)
    out = subprocess.run([sys.executable, "-m", "mtk", "validate", "spec.yaml", "-q", "--no-megatron", "--set",
                          f"cluster.runs_dir={tmp_path / 'runs'}"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = yaml.safe_load(spec)
    iterations = data["train"]["iterations"]
    job = validate(apply_overrides(data, [f"cluster.runs_dir={tmp_path / 'runs'}"]))
    p = goodput.plan(job)
    assert p.interval_iterations > iterations and p.one_save_suffices  # the case the advice must not pass on
    advice = [line for line in out.stdout.splitlines() if line.startswith(("checkpoint interval:", "goodput:"))]
    assert advice[0].startswith("checkpoint interval:     one save at the end suffices"), advice
    assert f"({iterations:,} iterations" in advice[0]
    assert "leave train.checkpoint.save_interval unset" in advice[1], advice
    assert f"set it to {p.interval_iterations:,}" not in out.stdout
    # unset, nothing is advised; with no save at the end either, it says how to get one
    unset = goodput.plan(validate(apply_overrides(data, [f"cluster.runs_dir={tmp_path}",
                                                         "train.checkpoint.save_interval=null"]))).lines()
    assert "with one save at the end (train.checkpoint.save_interval unset: saved at the end only)" in unset[-1]
    none = goodput.plan(validate(apply_overrides(data, [f"cluster.runs_dir={tmp_path}",
                                                        "train.checkpoint.save_interval=null",
                                                        "train.checkpoint.save_on_exit=false"]))).lines()
    assert f"set train.checkpoint.save_interval to {iterations:,}" in none[-1], none[-1]
