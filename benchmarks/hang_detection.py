"""How long the hang watchdog takes from a SIGSTOPped rank to its verdict (state/hang.json), local backend.

The tests prove THAT the watchdog ends a hung run (its verdict file, exit 45); how FAST is a timing claim and
lives here, on demand:
    python benchmarks/hang_detection.py [--step-timeout 10] [--repeat 1]
Prints, per repeat, the seconds from SIGSTOP to the verdict's own timestamp and to the run's exit, next to the
step timeout (the watchdog's budget) and gloo's timeout (600 s: what a hang would cost without it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "examples" / "tiny.yaml")


def mtk(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, check=True).stdout


def one(runs: Path, step_timeout: float) -> tuple[float, float]:
    out = mtk("launch", TINY, "--backend", "local", "--no-follow", "--set", "name=hangbench", "--set",
              f"cluster.runs_dir={runs}", "--set", "train.iterations=100000", "--set",
              "train.checkpoint.save_interval=null", "--set", "train.eval_interval=null", "--set",
              f"resilience.watchdog.step_timeout={step_timeout}", "--set", "resilience.watchdog.interval=1")
    run = Path(next(x for x in out.splitlines() if x.startswith("run: ")).removeprefix("run: "))
    summary = run / "state" / "heartbeats" / f"{socket.gethostname()}.json"  # the node monitor's summary
    try:
        while True:  # wait for rank 1 to be in a training step
            ranks = json.loads(summary.read_text())["ranks"] if summary.exists() else []
            beat = next((r for r in ranks if r["rank"] == 1), {})
            if beat.get("phase") == "step" and beat.get("iteration", 0) >= 3:
                break
            time.sleep(0.2)
        os.kill(beat["pid"], signal.SIGSTOP)
        stopped_wall, stopped = time.time(), time.monotonic()
        while json.loads(mtk("status", str(run), "--json"))[0]["state"] == "RUNNING":
            time.sleep(0.2)
        ended = time.monotonic() - stopped
        verdict = json.loads((run / "state" / "hang.json").read_text())
        return verdict["time"] - stopped_wall, ended
    finally:
        subprocess.run([sys.executable, "-m", "mtk", "cancel", str(run)], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-timeout", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            verdict_s, exit_s = one(Path(tmp) / f"r{i}", args.step_timeout)
            print(f"SIGSTOP -> verdict {verdict_s:.1f} s, -> run ended {exit_s:.1f} s "
                  f"(step timeout {args.step_timeout:.0f} s, gloo timeout 600 s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
