"""Every way a user stops a local run saves it (issue 44): Ctrl-C on the followed `mtk launch`, a SIGTERM to the
run's process group (`kill -- -PGID`, what reached torchrun and the DataLoader workers before), `mtk cancel` from
another shell; with the DataLoader's worker processes (the default, 2) and without (0).

One chain of launches of one job (they share its checkpoint dir), each interrupted while both ranks wait after an
iteration (so the signal lands mid-run however fast the machine is) and the next one resuming where it saved; the
last runs to the end. Every iteration's loss across the chain equals an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.faults import Hold
from support.terminal import as_a_terminal_starts_it

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
ITERS = 12
NOISE = ("Traceback", "[rank", "DataLoader worker", "OMP_NUM_THREADS", "*****", "torch/distributed/elastic",
         "SignalException", "tracebacks left out")


def mtk(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=600)
    if check and out.returncode != 0:
        raise AssertionError(f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def launch_argv(runs: Path, name: str, *sets: str) -> list[str]:
    argv = [sys.executable, "-m", "mtk", "launch", TINY, "--backend", "local", "--set", f"name={name}",
            "--set", f"cluster.runs_dir={runs}", "--set", f"train.iterations={ITERS}",
            "--set", "train.checkpoint.save_interval=null", "--set", "train.eval_interval=null"]
    for s in sets:
        argv += ["--set", s]
    return argv


def losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["iteration"]: r["lm_loss"] for r in records if r.get("kind", "train") == "train"}


def wait(what: str, predicate, proc: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + 600  # only fails a hung test
    while not predicate():
        assert proc.poll() is None, f"launch exited {proc.returncode} before {what}:\n{out.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def interrupted(runs: Path, tmp: Path, name: str, at: int, how: str, *sets: str) -> dict:
    """A followed launch (in a session of its own, as a terminal runs it) whose ranks wait after iteration ``at``;
    then ``how`` stops it: ``ctrl-c`` (SIGINT to the launch's process group), ``group-term`` (SIGTERM to the run's
    process group: runner, train step, torchrun) or ``cancel`` (`mtk cancel` from another process)."""
    hold = Hold(tmp / f"hold-{how}", after=[at])
    out, err = tmp / f"{how}.out", tmp / f"{how}.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(launch_argv(runs, name, *sets), stdout=fo, stderr=fe, start_new_session=True,
                                env={**os.environ, **hold.env()}, preexec_fn=as_a_terminal_starts_it)
    wait(f"both ranks to wait after iteration {at}", lambda: hold.held(at, ranks=2), proc, err)
    run_dir = Path(next(ln for ln in out.read_text().splitlines() if ln.startswith("run: ")).removeprefix("run: "))
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    elif how == "group-term":
        os.killpg(int(json.loads((run_dir / "run.json").read_text())["ids"]["runner"]), signal.SIGTERM)
    else:
        canceller = subprocess.Popen([sys.executable, "-m", "mtk", "cancel", str(run_dir)])
    wait("the ranks to catch the stop signal", lambda: hold.signalled(at), proc, err)
    hold.release(at)
    rc = proc.wait(timeout=600)
    if how == "cancel":
        assert canceller.wait(timeout=600) == 0
    return {"rc": rc, "out": out.read_text(), "err": err.read_text(), "run_dir": run_dir, "at": at}


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("interrupt")
    runs = tmp / "runs"
    straight = subprocess.run(launch_argv(runs, "straight"), capture_output=True, text=True, timeout=900)
    assert straight.returncode == 0, straight.stderr[-3000:]
    reference = losses(Path(next(ln for ln in straight.stdout.splitlines()
                                 if ln.startswith("run: ")).removeprefix("run: ")))
    stops = {
        "ctrl-c": interrupted(runs, tmp, "chain", 2, "ctrl-c"),  # data.num_workers: the default, 2
        "group-term": interrupted(runs, tmp, "chain", 5, "group-term"),
        "cancel": interrupted(runs, tmp, "chain", 8, "cancel", "data.num_workers=0"),
    }
    last = subprocess.run(launch_argv(runs, "chain"), capture_output=True, text=True, timeout=900)
    assert last.returncode == 0, last.stderr[-3000:]
    return {"runs": runs, "reference": reference, "stops": stops, "last": last}


@pytest.mark.parametrize("how", ["ctrl-c", "group-term", "cancel"])
def test_a_stop_saves_the_next_iteration_and_reads_cancelled_everywhere(chain, how):
    stop = chain["stops"][how]
    run_dir, saved = stop["run_dir"], stop["at"] + 1  # the signal is acted on after the iteration in flight
    last = json.loads((run_dir / "state" / "last_exit.json").read_text())
    assert (last["code"], last["iteration"], last["checkpoint_iteration"]) == (42, saved, saved), last
    assert f"iter_{saved:07d}" in {p.name for p in (chain["runs"] / "chain" / "checkpoints").iterdir()}
    said = f"cancelled at iteration {saved}, checkpoint {saved} saved; launching again resumes"
    [step] = json.loads(mtk("status", str(run_dir), "--json").stdout)
    assert (step["state"], step["exit_code"], step["reason"]) == ("CANCELLED", 42, said)
    [row] = [r for r in json.loads(mtk("ls", "--runs-dir", str(chain["runs"]), "--json").stdout)
             if r["run_dir"] == str(run_dir)]
    assert row["state"] == "CANCELLED" and row["iteration"] == saved, row
    assert f"CANCELLED at iteration {saved} (checkpoint {saved})" in mtk("report", str(run_dir)).stdout


@pytest.mark.parametrize("how", ["ctrl-c", "group-term", "cancel"])
def test_the_followed_launch_ends_with_one_line_and_no_traceback(chain, how):
    stop = chain["stops"][how]
    saved = stop["at"] + 1
    shown = stop["out"] + stop["err"]
    assert not [n for n in NOISE if n in shown], shown[-4000:]
    assert stop["err"].rstrip().splitlines()[-1] == (f"train: CANCELLED exit=42 cancelled at iteration {saved}, "
                                                     f"checkpoint {saved} saved; launching again resumes")
    assert stop["rc"] == (130 if how == "ctrl-c" else 1)
    log = (stop["run_dir"] / "logs" / "train.log").read_text()
    assert "OMP_NUM_THREADS" in log  # left out of the followed output, not out of the log


def test_each_relaunch_resumes_where_the_stop_saved_with_the_uninterrupted_losses(chain):
    stops, reference = chain["stops"], chain["reference"]
    starts = [1] + [stops[h]["at"] + 2 for h in ("ctrl-c", "group-term", "cancel")]
    runs = [s["run_dir"] for s in stops.values()]
    last_dir = Path(next(ln for ln in chain["last"].stdout.splitlines()
                         if ln.startswith("run: ")).removeprefix("run: "))
    seen: dict[int, float] = {}
    for start, run_dir in zip(starts, [*runs, last_dir], strict=True):
        got = losses(run_dir)
        assert min(got) == start, f"{run_dir.name} started at iteration {min(got)}, not {start}"
        seen.update(got)
    assert sorted(seen) == list(range(1, ITERS + 1))
    for it in range(1, ITERS + 1):
        assert seen[it] == reference[it], f"iteration {it}: {seen[it]} != {reference[it]} (uninterrupted)"


def test_ctrl_c_in_the_terminal_that_runs_run_sh_saves_and_exits_42(tmp_path):
    """The run's ``run.sh`` run by hand (README: the exact commands): Ctrl-C reaches bash, the train step and torchrun
    (one terminal group), torchrun passes it to its ranks' groups, DataLoader workers included."""
    preview = subprocess.run([*launch_argv(tmp_path / "runs", "byhand"), "--dry-run"], capture_output=True,
                             text=True, timeout=600)
    assert preview.returncode == 0, preview.stderr
    run_dir = Path(preview.stdout.split("preview written to ")[1].split()[0])
    hold = Hold(tmp_path / "hold", after=[2])
    env = {**os.environ, **hold.env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "run.sh.out"
    with open(out, "w") as fo:
        proc = subprocess.Popen(["bash", str(run_dir / "run.sh")], stdout=fo, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    wait("both ranks to wait after iteration 2", lambda: hold.held(2, ranks=2), proc, out)
    os.killpg(proc.pid, signal.SIGINT)
    wait("the ranks to catch SIGINT", lambda: hold.signalled(2), proc, out)
    hold.release(2)
    assert proc.wait(timeout=600) == 42, out.read_text()[-3000:]
    last = json.loads((run_dir / "state" / "last_exit.json").read_text())
    assert (last["code"], last["iteration"], last["checkpoint_iteration"], last["reason"]) == (
        42, 3, 3, "signal SIGINT"), last
    shown = out.read_text()
    assert "Traceback" not in shown and "DataLoader worker" not in shown, shown[-3000:]
    assert shown.rstrip().splitlines()[-1] == "mtk: node local torchrun exited 1; step exit code 42"
