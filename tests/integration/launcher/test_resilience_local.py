"""Hang and straggler detection for real: `mtk launch --backend local`, torchrun + gloo, two ranks.

* A SIGSTOPped rank: the node's ``mtk-entrypoint train`` sees its heartbeat go quiet, writes state/hang.json
  naming it, collects every rank's Python stacks into debug/ and exits with ``exitcodes.HANG`` (gloo's own
  timeout, 600 s, would write no verdict and exit with another code).
* A rank slowed by a sleep injected from outside the package (a ``sitecustomize`` on PYTHONPATH that this test
  writes; nothing in mtk knows about it) is named in metrics.jsonl, on the iteration line and by `mtk report`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mtk import exitcodes, run_layout

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
GLOO_TIMEOUT_S = 600  # training/distributed.py: what ends a hang without the watchdog (no verdict file)

pytestmark = pytest.mark.integration


def mtk(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    assert out.returncode == 0, f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def launch(runs: Path, name: str, *sets: str, env: dict[str, str] | None = None, follow: bool = False):
    args = ["launch", TINY, "--backend", "local", "--set", f"name={name}", "--set", f"cluster.runs_dir={runs}",
            "--set", "debug.env_dump=false", "--set", "train.eval_interval=null"]
    for s in sets:
        args += ["--set", s]
    out = mtk(*args, "--follow" if follow else "--no-follow", env=env)
    line = [x for x in out.stdout.splitlines() if x.startswith("run: ")][-1]
    return out, Path(line.removeprefix("run: "))


def train_records(run_dir: Path) -> list[dict]:
    path = run_dir / run_layout.METRICS_FILE
    if not path.exists():
        return []
    complete = path.read_text().split("\n")[:-1]  # the last piece is a line still being written (or "")
    return [json.loads(x) for x in complete if x.strip()]


def train_state(run_dir: Path) -> dict:
    return json.loads(mtk("status", str(run_dir), "--json").stdout)[0]


def test_sigstopped_rank_ends_the_run_with_the_hang_code(tmp_path):
    runs = tmp_path / "runs"
    timeout = 10.0
    _, run_dir = launch(runs, "hang", "train.iterations=100000", "train.checkpoint.save_interval=null",
                        f"resilience.watchdog.step_timeout={timeout}", "resilience.watchdog.interval=1",
                        "resilience.watchdog.startup_timeout=600")
    try:
        _sigstop_one_rank_and_check(run_dir, timeout)
    finally:  # a failed check must not leave a 100,000-iteration run behind
        subprocess.run([sys.executable, "-m", "mtk", "cancel", str(run_dir)], capture_output=True, timeout=120)


def _sigstop_one_rank_and_check(run_dir: Path, timeout: float) -> None:
    deadline = time.time() + 300
    while len([r for r in train_records(run_dir) if r["kind"] == "train"]) < 3 and time.time() < deadline:
        time.sleep(0.5)
    assert train_records(run_dir), (run_dir / "logs" / "train.log").read_text()[-3000:]
    # Rank 1's heartbeat as the node's hang monitor summarises it on the shared run dir (the rank's own file is
    # in node-local storage).
    summary = run_dir / run_layout.HEARTBEATS_DIR / f"{socket.gethostname()}.json"
    while time.time() < deadline:  # the publisher and the monitor write every interval: they may trail the metrics
        ranks = json.loads(summary.read_text())["ranks"] if summary.exists() else []
        beat = next((r for r in ranks if r["rank"] == 1), {})
        if beat.get("phase") == "step":
            break
        time.sleep(0.2)
    assert beat.get("phase") == "step" and beat["deadline"] - beat["progress"] == pytest.approx(timeout), beat

    os.kill(beat["pid"], signal.SIGSTOP)
    # A generous deadline that only fails a hung test. Which of the two ended the run is told by events, not by a
    # stopwatch: the watchdog writes its verdict file and exits HANG; gloo's timeout writes none and exits otherwise.
    deadline = time.time() + 2 * GLOO_TIMEOUT_S
    try:
        while train_state(run_dir)["state"] == "RUNNING" and time.time() < deadline:
            time.sleep(0.5)
    finally:
        if Path(f"/proc/{beat['pid']}").exists():
            os.kill(beat["pid"], signal.SIGKILL)
    state = train_state(run_dir)
    log = (run_dir / "logs" / "train.log").read_text()
    assert state["exit_code"] == exitcodes.HANG, log[-3000:]
    assert (run_dir / run_layout.HANG_FILE).exists(), "exit code without the watchdog's verdict"

    hang = json.loads((run_dir / run_layout.HANG_FILE).read_text())
    host = socket.gethostname()
    assert hang["blamed_ranks"] == [1] and hang["blamed_hosts"] == [host], hang
    assert "rank(s) 1 on" in log and "HANG" in log
    for rank in (0, 1):
        stacks = (run_dir / run_layout.DEBUG_DIR / f"stacks-{host}-rank{rank}.txt").read_text()
        assert "Thread 0x" in stacks and 'File "' in stacks, f"rank {rank} stacks:\n{stacks}"
    # Rank 0 was waiting for rank 1 inside a collective, inside the training loop.
    assert "loop.py" in (run_dir / run_layout.DEBUG_DIR / f"stacks-{host}-rank0.txt").read_text()
    # Nothing of the run is left running.
    assert not [p for p in os.listdir("/proc") if p.isdigit() and str(run_dir) in _cmdline(p)]


SLOW_RANK_HOOK = """\
# Test-only: slow one rank's forward step. Written by tests/integration/launcher/test_resilience_local.py.
import os

if os.environ.get("RANK") is not None and os.environ.get("RANK") == os.environ.get("MTK_TEST_SLOW_RANK"):
    import time

    import mtk.training.loop as _loop

    _original = _loop.forward_step

    def _slow_forward_step(*args, **kwargs):
        time.sleep(float(os.environ["MTK_TEST_SLOW_S"]))
        return _original(*args, **kwargs)

    _loop.forward_step = _slow_forward_step
"""


# Two ranks: the median is their mean, so a rank's ratio is 2·t/(t + t_other) < 2. The injected 1 s dwarfs a tiny
# model's forward even on a loaded machine (ratio ≥ 1.3, the default threshold, while the other rank's forward
# stays under ~1.1 s); without the hook a ratio ≥ 1.9 needs one rank 19× slower than the other.
SLOW_S = 1.0
EVEN_THRESHOLD = 1.9


def test_injected_sleep_names_the_straggler(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SLOW_RANK_HOOK))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
           "MTK_TEST_SLOW_RANK": "1", "MTK_TEST_SLOW_S": str(SLOW_S)}
    runs = tmp_path / "runs"
    # tp=1: two data-parallel ranks, so the forward section is local compute on each.
    out, run_dir = launch(runs, "slow", "parallel.tp=1", "train.iterations=8", "resilience.stragglers.interval=4",
                          "train.checkpoint.save_interval=null", env=env, follow=True)
    records = train_records(run_dir)
    gathers = [r for r in records if r["kind"] == "stragglers"]
    assert [g["iteration"] for g in gathers] == [4, 8]
    for g in gathers:
        assert g["stragglers"] == [1], g
        assert g["slowest_ranks"][0]["rank"] == 1 and g["slowest_ranks"][0]["ratio"] > g["threshold"]
        assert g["slowest_nodes"][0]["host"] == socket.gethostname()
    lines = [x for x in out.stdout.splitlines() if " iteration " in x and "straggler: rank 1 (" in x]
    assert [int(x.split()[1].split("/")[0]) for x in lines] == [4, 8], out.stdout[-3000:]

    report = mtk("report", str(run_dir), "--out", str(tmp_path / "report")).stdout
    assert "straggler" in report and "rank 1" in report, report


def test_no_straggler_without_the_hook(tmp_path):
    runs = tmp_path / "runs"
    out, run_dir = launch(runs, "even", "parallel.tp=1", "train.iterations=4", "resilience.stragglers.interval=2",
                          f"resilience.stragglers.threshold={EVEN_THRESHOLD}", "train.checkpoint.save_interval=null",
                          follow=True)
    gathers = [r for r in train_records(run_dir) if r["kind"] == "stragglers"]
    assert [g["iteration"] for g in gathers] == [2, 4]
    assert all(g["stragglers"] == [] for g in gathers), gathers
    assert "straggler:" not in out.stdout


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
