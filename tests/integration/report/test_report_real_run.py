"""`mtk report` on a real tiny CPU training run that resumed from an earlier checkpoint.

Launch 1 trains 6 iterations and checkpoints only at 4; launch 2 (same run dir, 8 iterations) resumes from 4,
so iterations 5 and 6 are logged twice. The summary must agree with the metrics file the engine wrote.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the first 8 bytes of every PNG file (its specification, 5.2)

REPO = Path(__file__).resolve().parents[3]


def _mtk(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mtk.launcher.cli", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"mtk {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _wait_for_runner(run_dir: Path, timeout: float = 600) -> None:
    """Wait until this launch's detached runner exits. Relaunching into an existing run dir can return as soon
    as the previous launch's state file is seen, before the new runner has trained (local backend)."""
    pid = int(json.loads((run_dir / "run.json").read_text())["ids"]["runner"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.5)
    raise AssertionError(f"local runner {pid} still running after {timeout}s")


@pytest.mark.integration
def test_report_on_resumed_tiny_run(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--backend", "local", "--run-dir", str(run_dir), "--set", f"cluster.runs_dir={tmp_path}",
              "--set", f"train.checkpoint.dir={tmp_path / 'ckpt'}", "--set", "train.checkpoint.save_interval=4",
              "--set", "train.checkpoint.save_on_exit=false", "--set", "train.eval_interval=3"]
    _mtk("launch", str(REPO / "examples" / "tiny.yaml"), *common, "--set", "train.iterations=6")
    _mtk("launch", str(REPO / "examples" / "tiny.yaml"), *common, "--set", "train.iterations=8")
    _wait_for_runner(run_dir)
    status = json.loads(_mtk("status", str(run_dir), "--json").stdout)
    assert [(st["step"], st["state"]) for st in status] == [("train", "COMPLETED")], status

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["kind"] == "train"]
    evals = [r for r in lines if r["kind"] == "eval"]
    iterations = [r["iteration"] for r in train]
    assert iterations == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8], "the engine did not resume from the checkpoint at 4"

    out = _mtk("report", str(run_dir), "--json", "--no-wandb").stdout
    s = json.loads(out)
    assert s["final_loss"] == pytest.approx(train[-1]["lm_loss"])
    assert s["final_eval_loss"] == pytest.approx(evals[-1]["lm_loss"])
    assert s["median_tokens_per_s"] == pytest.approx(statistics.median(r["tokens_per_s"] for r in train))
    assert s["median_tflops_per_gpu"] == pytest.approx(statistics.median(r["tflops_per_gpu"] for r in train))
    assert s["iterations_lost"] == len(iterations) - len(set(iterations)) == 2
    assert s["restarts"] == 1
    assert s["final_iteration"] == 8
    assert s["gpu"] == "unknown" and s["mfu"] is None  # a CPU run has no GPU peak
    assert len(s["plots"]) == 5
    for name in s["plots"]:
        data = (run_dir / "report" / name).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000, name
    assert json.loads((run_dir / "report" / "summary.json").read_text()) == s
