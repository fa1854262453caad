"""Following a real local run (torchrun, 2 CPU ranks, gloo, megatron-core) and reporting its job's launches as one
history (issue 46, item 6): the iteration line's ETA, ``mtk status`` naming the run with its iteration and ETA,
and ``mtk report --history`` reading three launches of one job as iterations 1..N.

One chain of three tiny launches of job ``hist``, shared by the tests below:
1. a long run, followed with ``mtk status`` while it trains, stopped with ``mtk stop`` (checkpoint at k);
2. the job again with ``train.iterations=k+3``: resumes at k, trains k+1..k+3;
3. the job again with ``train.iterations=k+6``: trains k+4..k+6.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
LONG = 1000  # the first launch's train.iterations: far more than it reaches, so only the stop ends it


def mtk(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "WANDB_MODE": "", "WANDB_API_KEY": ""})
    if check and out.returncode != 0:
        raise AssertionError(f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr}")
    return out


def launch_args(runs: Path, *sets: str) -> list[str]:
    """A launch of job hist; each saves once, when it ends (stopped or done): the next launch resumes there."""
    args = ["launch", TINY, "--backend", "local", "--set", "name=hist", "--set", f"cluster.runs_dir={runs}",
            "--set", f"train.checkpoint.save_interval={LONG}"]
    for s in sets:
        args += ["--set", s]
    return args


def run_dir_of(out: str) -> Path:
    return Path([ln for ln in out.splitlines() if ln.startswith("run: ")][-1].removeprefix("run: "))


def logged(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [r["iteration"] for r in map(json.loads, filter(None, lines)) if r.get("kind") == "train"]


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict:
    """The three launches; `mtk status` (text and --json) taken while the first one trains."""
    runs = tmp_path_factory.mktemp("runs")
    logs = tmp_path_factory.mktemp("first-launch")
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mtk", *launch_args(runs, f"train.iterations={LONG}")],
                                stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + 600  # only fails a hung test
        first = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = [d for d in runs.glob("hist-*") if len(logged(d)) >= 3]
            if found:
                first = found[0]
                break
            time.sleep(0.2)
        assert first is not None, f"iteration 3 never logged (rc={proc.poll()}):\n{(logs / 'err').read_text()}"
        running_json = json.loads(mtk("status", str(first), "--json").stdout)
        running_text = mtk("status", str(first)).stdout
        mtk("stop", str(first))
        assert proc.wait(timeout=600) == 43, (logs / "err").read_text()[-3000:]
    k = logged(first)[-1]
    second = mtk(*launch_args(runs, f"train.iterations={k + 3}"))
    third = mtk(*launch_args(runs, f"train.iterations={k + 6}"))
    return {"runs": runs, "k": k, "dirs": [first, run_dir_of(second.stdout), run_dir_of(third.stdout)],
            "running_json": running_json, "running_text": running_text,
            "first_out": (logs / "out").read_text() + (logs / "err").read_text(),
            "second_out": second.stdout + second.stderr}


def test_iteration_lines_end_with_the_eta(chain):
    lines = [ln for ln in chain["first_out"].splitlines() if re.search(r"iteration +\d+/ +1000 \|", ln)]
    assert lines, chain["first_out"][-3000:]
    assert all(re.search(r"\| ETA (\d+[dhm]\d\d[hms]|\d+s) \|", ln) for ln in lines), lines
    k = chain["k"]
    last = [ln for ln in chain["second_out"].splitlines() if f"iteration {k + 3:8d}/{k + 3:8d}" in ln]
    assert len(last) == 1 and last[0].endswith("| ETA 0s |"), chain["second_out"][-3000:]


def test_status_json_names_the_run_and_gives_the_train_steps_iteration_and_eta(chain):
    first = chain["dirs"][0]
    [step] = chain["running_json"]
    assert (step["step"], step["state"]) == ("train", "RUNNING"), step
    assert (step["run"], step["job"], step["backend"], step["run_dir"]) == (first.name, "hist", "local", str(first))
    assert step["total"] == LONG and 3 <= step["iteration"] < LONG and step["eta_s"] > 0, step


def test_status_text_shows_the_iteration_and_eta_while_running_and_not_after(chain):
    it = chain["running_json"][0]["iteration"]
    shown = re.search(rf"^  iteration (\d+)/{LONG}, ETA \d+[dhms] at the recent pace$", chain["running_text"], re.M)
    assert shown and int(shown[1]) >= it, chain["running_text"]  # taken just after the JSON: as far or further
    k, third = chain["k"], chain["dirs"][2]
    done = mtk("status", str(third)).stdout
    assert f"\n  iteration {k + 6}/{k + 6}\n" in done and "ETA" not in done, done


def test_report_history_reads_the_three_launches_as_one_timeline(chain):
    k, dirs = chain["k"], chain["dirs"]
    data = json.loads(mtk("report", "--history", "hist", "--runs-dir", str(chain["runs"]), "--json").stdout)
    spans = [(r["run"], r["first_iteration"], r["last_iteration"]) for r in data["runs"]]
    assert spans == [(dirs[0].name, 1, k), (dirs[1].name, k + 1, k + 3), (dirs[2].name, k + 4, k + 6)], spans
    assert (data["final_iteration"], data["train_records"]) == (k + 6, k + 6), data
    assert (data["restarts"], data["iterations_lost"]) == (2, 0), data
    assert data["ended"] == f"COMPLETED at iteration {k + 6}", data
    dest = dirs[2] / "report-history"
    assert {"loss.png", "lr.png"} <= set(data["plots"]) and all((dest / p).is_file() for p in data["plots"])
    text = (dest / "summary.md").read_text()
    assert text.startswith("# Job history: hist (3 launches)"), text
    assert f"{dirs[1].name} (iterations {k + 1}-{k + 3})" in text, text


def test_history_up_to_an_older_run_stops_there(chain):
    k, dirs = chain["k"], chain["dirs"]
    out = mtk("report", "--history", str(dirs[1]), "--no-plots", "--out", str(chain["runs"] / "h2")).stdout
    assert out.startswith("history of job hist: 2 launch(es), oldest first"), out
    assert f"runs  2: {dirs[0].name} (iterations 1-{k}); {dirs[1].name} (iterations {k + 1}-{k + 3})" in \
        re.sub(r" {2,}", "  ", out), out


def test_report_of_a_job_name_is_its_newest_launch_and_says_history_exists(chain):
    k = chain["k"]
    out = mtk("report", "hist", "--runs-dir", str(chain["runs"]), "--no-plots")
    assert "note: job hist has 3 launches; `mtk report --history hist` reports them as one timeline" in out.stderr
    assert re.search(rf"^final iteration +{k + 6}$", out.stdout, re.M), out.stdout
    assert re.search(r"^restarts +0$", out.stdout, re.M) and "runs " not in out.stdout, out.stdout
