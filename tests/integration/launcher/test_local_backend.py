"""`mtk launch --backend local` for real: torchrun + gloo + megatron-core, two processes, tiny model.

Covers the embedded default end to end: launch, status, logs, cancel from other shells, and the relaunch
that resumes from the latest checkpoint with exactly the losses of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.faults import Hold

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")

pytestmark = pytest.mark.integration


def mtk(*args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    if check and out.returncode != 0:
        raise AssertionError(f"mtk {' '.join(args)} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def launch(runs: Path, name: str, *sets: str, follow: bool = True,
           env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    args = ["launch", TINY, "--backend", "local", "--set", f"name={name}", "--set", f"cluster.runs_dir={runs}"]
    for s in sets:
        args += ["--set", s]
    out = mtk(*args, "--follow" if follow else "--no-follow", env=env)
    run_line = [line for line in out.stdout.splitlines() if line.startswith("run: ")][-1]
    return out, Path(run_line.removeprefix("run: "))


def losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["iteration"]: r["lm_loss"] for r in records if r.get("kind", "train") == "train"}


def tracker(runs: Path, name: str) -> int:
    path = runs / name / "checkpoints" / "latest_checkpointed_iteration.txt"
    return int(path.read_text()) if path.exists() else 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    out, run_dir = launch(runs, "straight", "train.iterations=12", "train.checkpoint.save_interval=4")
    return out, run_dir, runs


def test_launch_trains_and_reports(uninterrupted):
    out, run_dir, runs = uninterrupted
    assert " iteration       12/      12 |" in out.stdout  # Megatron-style line streamed by launch
    got = losses(run_dir)
    assert sorted(got) == list(range(1, 13))
    assert got[12] < got[1]
    assert tracker(runs, "straight") == 12
    status = json.loads(mtk("status", str(run_dir), "--json").stdout)
    assert [(s["step"], s["state"], s["exit_code"]) for s in status] == [("train", "COMPLETED", 0)]
    logs = mtk("logs", str(run_dir)).stdout
    assert "iteration        5/      12" in logs
    run = json.loads((run_dir / "run.json").read_text())
    assert run["backend"] == "local" and run["name"] == "straight"


BLOCK_HOOK = """\
# Test-only, written by tests/integration/launcher/test_local_backend.py: rank 0 stops making progress at
# iteration 6 (after the checkpoint at 4), so the cancel always lands mid-run on any machine speed.
import os

if os.environ.get("RANK") == "0" and os.environ.get("MTK_TEST_BLOCK_MARK"):
    import time

    import mtk.training.loop as _loop

    _original = _loop.Trainer.train_step

    def _train_step(self):
        if self.iteration == 6:
            open(os.environ["MTK_TEST_BLOCK_MARK"], "w").close()
            while True:
                time.sleep(1)
        return _original(self)

    _loop.Trainer.train_step = _train_step
"""


def test_kill_and_relaunch_resumes_exactly(uninterrupted, tmp_path):
    _, straight_dir, _ = uninterrupted
    runs = tmp_path / "runs"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BLOCK_HOOK)
    mark = tmp_path / "blocked.mark"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
           "MTK_TEST_BLOCK_MARK": str(mark)}
    _, first = launch(runs, "resumed", "train.iterations=12", "train.checkpoint.save_interval=4", follow=False,
                      env=env)
    deadline = time.time() + 600  # only fails a hung test
    while not mark.exists() and time.time() < deadline:
        time.sleep(0.5)
    assert mark.exists(), mtk("logs", str(first)).stdout[-3000:]
    mtk("cancel", str(first))
    saved = tracker(runs, "resumed")
    assert saved == 4, "rank 0 blocked at iteration 6: the checkpoint at 4 is the latest"
    states = json.loads(mtk("status", str(first), "--json").stdout)
    assert states[0]["state"] in ("CANCELLED", "FAILED")

    _out, second = launch(runs, "resumed", "train.iterations=12", "train.checkpoint.save_interval=4")
    resumed = losses(second)
    assert min(resumed) == saved + 1, f"resumed at {min(resumed)}, checkpoint was {saved}"
    reference = losses(straight_dir)
    for it in range(saved + 1, 13):
        assert resumed[it] == reference[it], f"iteration {it}: {resumed[it]} != {reference[it]}"


def test_cancel_leaves_nothing_running(tmp_path):
    runs = tmp_path / "runs"
    hold = Hold(tmp_path / "hold", after=[1])  # both ranks wait after iteration 1: the cancel lands mid-run
    _, run_dir = launch(runs, "cancelled", "train.iterations=500", follow=False, env={**os.environ, **hold.env()})
    deadline = time.time() + 600  # only fails a hung test
    while not hold.held(1, ranks=2) and time.time() < deadline:
        time.sleep(0.2)
    assert "iteration        1/" in (run_dir / "logs" / "train.log").read_text(), "never trained: nothing to cancel"
    assert [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).count(str(run_dir))], "no process to end"
    runner = int(json.loads((run_dir / "run.json").read_text())["ids"]["runner"])
    mtk("cancel", str(run_dir))
    mtk("cancel", str(run_dir))  # safe to repeat
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid).count(str(run_dir))]
    assert not leftovers, [_cmdline(p) for p in leftovers]
    assert not Path(f"/proc/{runner}").exists() or _state(runner) == "Z"


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
