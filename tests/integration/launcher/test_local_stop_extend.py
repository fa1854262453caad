"""Stop, extend and relaunch a real local run (torchrun, 2 CPU ranks, gloo, megatron-core), as a user does
after `make demo` (issue 37, cases 3, 4 and 9 and "a run's record tells the truth").

One chain of four tiny launches, shared by the tests below:
1. a long run stopped with `mtk stop` after it logged iteration 2 (it checkpoints at the next iteration, k);
2. the same job extended to k+3 iterations with the default `train.lr_schedule_on_resume` (keep);
3. the same launch again (nothing left to train), with `MTK_DEBUG=1`;
4. a copy of checkpoint k extended to k+3 with `replan`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
LONG = 1000  # the stopped run's train.iterations: far more than it reaches, so only the stop ends it
# examples/tiny.yaml's schedule
LR, MIN_LR, WARMUP, GBS = 1e-3, 1e-4, 3, 8
CHECKPOINT_NOISE = ("torch.distributed is disabled, unavailable or uninitialized", "The argument order of load")


def mtk(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=900,
                         env={**os.environ, **(env or {})})
    if check and out.returncode != 0:
        raise AssertionError(f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr}")
    return out


def launch_args(runs: Path, name: str, *sets: str) -> list[str]:
    args = ["launch", TINY, "--backend", "local", "--set", f"name={name}", "--set", f"cluster.runs_dir={runs}"]
    for s in sets:
        args += ["--set", s]
    return args


def run_dir_of(out: str) -> Path:
    return Path([ln for ln in out.splitlines() if ln.startswith("run: ")][-1].removeprefix("run: "))


def train_records(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["iteration"]: r for r in map(json.loads, filter(None, lines)) if r.get("kind") == "train"}


def megatron_lr(iteration: int, decay_iters: int) -> float:
    """The LR Megatron's cosine schedule logs at ``iteration`` (warmup and scale as examples/tiny.yaml)."""
    steps, warmup, decay = iteration * GBS, WARMUP * GBS, decay_iters * GBS
    if steps <= warmup:
        return LR * steps / warmup
    if steps > decay:
        return MIN_LR
    return MIN_LR + (LR - MIN_LR) * 0.5 * (math.cos(math.pi * (steps - warmup) / (decay - warmup)) + 1)


def lr_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if "LR schedule differs from the checkpoint's" in ln]
    assert len(lines) == 1, f"expected one LR line at resume, got {lines}\n{out[-3000:]}"
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def stopped(runs, tmp_path_factory):
    """Launch 1: `mtk launch` following a long run; `mtk stop` once iteration 2 is logged."""
    logs = tmp_path_factory.mktemp("stop-launch")
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mtk", *launch_args(runs, "ext", f"train.iterations={LONG}")],
                                stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + 600  # only fails a hung test
        run_dir = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = [d for d in runs.glob("ext-*") if (d / "metrics.jsonl").is_file()]
            if found and 2 in train_records(found[0]):
                run_dir = found[0]
                break
            time.sleep(0.2)
        assert run_dir is not None, f"iteration 2 never logged (launch rc={proc.poll()}):\n{(logs / 'err').read_text()}"
        mtk("stop", str(run_dir))
        rc = proc.wait(timeout=600)
    last = json.loads((run_dir / "state" / "last_exit.json").read_text())
    return rc, (logs / "out").read_text(), (logs / "err").read_text(), run_dir, last["iteration"]


@pytest.fixture(scope="module")
def kept(runs, stopped):
    """Launch 2: extended to k+3 with the default schedule choice (keep)."""
    k = stopped[4]
    out = mtk(*launch_args(runs, "ext", f"train.iterations={k + 3}"))
    return out.stdout + out.stderr, run_dir_of(out.stdout), k


@pytest.fixture(scope="module")
def nothing_to_do(runs, kept):
    """Launch 3: the same launch again, with MTK_DEBUG=1: resumes at k+3 and trains nothing."""
    k = kept[2]
    out = mtk(*launch_args(runs, "ext", f"train.iterations={k + 3}"), env={"MTK_DEBUG": "1"})
    return out.stdout + out.stderr, run_dir_of(out.stdout), k


@pytest.fixture(scope="module")
def replanned(runs, stopped, kept, tmp_path_factory):
    """Launch 4: checkpoint k, copied to a job of its own runs dir, extended to k+3 with replan."""
    k = stopped[4]
    other = tmp_path_factory.mktemp("runs-replan")
    src, dst = runs / "ext" / "checkpoints", other / "extr" / "checkpoints"
    shutil.copytree(src / f"iter_{k:07d}", dst / f"iter_{k:07d}")
    (dst / "latest_checkpointed_iteration.txt").write_text(f"{k}\n")
    out = mtk(*launch_args(other, "extr", f"train.iterations={k + 3}", "train.lr_schedule_on_resume=replan"))
    return out.stdout + out.stderr, run_dir_of(out.stdout), k


def test_mtk_stop_makes_the_following_launch_exit_43_and_say_stopped(stopped):
    rc, _out, err, _run_dir, k = stopped
    assert rc == 43, err[-3000:]
    assert f"train: STOPPED exit=43 stopped by the exit trigger (mtk stop) at iteration {k}, checkpoint {k}" in err
    assert "FAILED" not in err


def test_a_stopped_run_is_stopped_in_ls_status_and_report(runs, stopped):
    _rc, _out, _err, run_dir, k = stopped
    rows = {r["name"]: r for r in json.loads(mtk("ls", "--runs-dir", str(runs), "--json").stdout)}
    assert rows[run_dir.name]["state"] == "STOPPED" and rows[run_dir.name]["iteration"] == k, rows[run_dir.name]
    status = json.loads(mtk("status", str(run_dir), "--json").stdout)
    assert [(s["step"], s["state"], s["exit_code"]) for s in status] == [("train", "STOPPED", 43)]
    report = mtk("report", str(run_dir), "--no-plots", "--no-wandb").stdout
    assert f"STOPPED by mtk stop at iteration {k} (checkpoint {k})" in report, report


def test_the_runner_line_says_what_its_pid_is(stopped):
    _rc, out, err, run_dir, _k = stopped
    pid = json.loads((run_dir / "run.json").read_text())["ids"]["runner"]
    assert f"runner: {pid}" in out
    assert "the runner is the process that runs this run's steps, detached from this shell" in err
    assert (out + err).count(f"runner: {pid}") == 1 and "runner: pid" not in out + err  # said once


def test_extending_keeps_the_checkpoint_lr_schedule_by_default_and_says_so(kept):
    out, run_dir, k = kept
    line = lr_line(out)
    assert f"checkpoint cosine 0.001→0.0001, warmup {WARMUP}, decay to iteration {LONG}" in line
    assert f"spec cosine 0.001→0.0001, warmup {WARMUP}, decay to iteration {k + 3}" in line
    assert "Following the checkpoint's (train.lr_schedule_on_resume: keep)" in line
    lr = train_records(run_dir)[k + 1]["lr"]
    assert lr == pytest.approx(megatron_lr(k + 1, LONG))
    assert f"iteration {k + 1} lr {lr:.6E} (replan would give {megatron_lr(k + 1, k + 3):.6E})" in line


def test_extending_with_replan_follows_the_spec_schedule_and_says_so(replanned):
    out, run_dir, k = replanned
    line = lr_line(out)
    assert "Following this spec's (train.lr_schedule_on_resume: replan)" in line
    lr = train_records(run_dir)[k + 1]["lr"]
    assert lr == pytest.approx(megatron_lr(k + 1, k + 3)) and lr != pytest.approx(megatron_lr(k + 1, LONG))
    assert f"iteration {k + 1} lr {lr:.6E} (keep would give {megatron_lr(k + 1, LONG):.6E})" in line


def test_a_resume_prints_no_checkpoint_warnings_unless_mtk_debug(kept, nothing_to_do):
    quiet, debug = kept[0], nothing_to_do[0]
    assert "[checkpoint] resumed from" in quiet and "[checkpoint] resumed from" in debug
    assert not [w for w in CHECKPOINT_NOISE if w in quiet], quiet[-3000:]
    assert all(w in debug for w in CHECKPOINT_NOISE), debug[-3000:]


def test_report_without_run_passes_over_a_relaunch_that_trained_nothing(runs, kept, nothing_to_do):
    _out, noop_dir, k = nothing_to_do
    out = mtk("report", "--runs-dir", str(runs), "--no-plots", "--no-wandb")
    assert f"report for {kept[1]}" in out.stdout, out.stdout + out.stderr
    said = f"passing over {noop_dir.name}: trained nothing: its checkpoint was already at iteration {k + 3}"
    assert said in out.stderr, out.stderr
    rows = {r["name"]: r for r in json.loads(mtk("ls", "--runs-dir", str(runs), "--json").stdout)}
    assert (rows[noop_dir.name]["state"], rows[noop_dir.name]["iteration"]) == ("COMPLETED", k + 3)


def test_a_resume_at_another_lr_is_refused_at_launch_in_one_line_naming_the_checkpoints_value(runs, stopped):
    """megatron-core keys optimizer param groups by their LRs: a changed train.lr would fail inside the load on
    every rank. The launch refuses it first (exit 2), writes no run dir, and says the value and the fix."""
    before = sorted(runs.glob("ext-*"))
    out = mtk(*launch_args(runs, "ext", "train.lr=0.002"), check=False)
    said = out.stdout + out.stderr
    assert out.returncode == 2, said[-3000:]
    assert "train.lr: checkpoint " in said and "was saved with train.lr=0.001 but this job has train.lr=0.002" in said
    assert "Resume with train.lr=0.001" in said and "train.init_from" in said, said
    assert "Traceback" not in said and "Could not find parameter group" not in said, said
    assert sorted(runs.glob("ext-*")) == before, "a refused launch writes no run dir"


@pytest.mark.parametrize(("sets", "field", "saved"), [
    (["train.lr=0.002"], "train.lr", "0.001"),
    (["train.min_lr=0.0002"], "train.min_lr", "0.0001"),
    (["train.decoupled_lr=0.003"], "train.decoupled_lr", "unset"),
])
def test_the_node_precheck_refuses_each_lr_field_from_the_real_checkpoint(runs, stopped, sets, field, saved):
    """The same rule on the node before torchrun (and on every rank before it loads), over the real checkpoint's
    common state; the unchanged spec passes."""
    from mtk.launcher.ckpt_precheck import check_resume_checkpoint
    from mtk.training.reshard import ReshardRefused

    from mtk.spec import load_job

    run_dir = stopped[3]
    base = ["name=ext", f"cluster.runs_dir={runs}", f"train.checkpoint.dir={runs / 'ext' / 'checkpoints'}"]
    check_resume_checkpoint(load_job(TINY, base), str(run_dir))
    with pytest.raises(ReshardRefused) as err:
        check_resume_checkpoint(load_job(TINY, [*base, *sets]), str(run_dir))
    assert str(err.value).startswith(f"{field}: checkpoint ") and f"saved with {field}={saved} " in str(err.value)
    assert err.value.exit_code == 2 and err.value.spec_field == field
