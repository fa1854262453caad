"""CLI start-up time: `mtk --help` and `mtk launch --dry-run` per backend, next to `python -c pass`.

Goal on the reference machine (2 cores): --help ≤ 0.2 s, dry-run ≤ 0.5 s. Run on demand:
    python benchmarks/cli_startup.py [--repeat 15]
Prints the median wall time of each command and its ratio to bare interpreter start-up.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "examples" / "tiny.yaml")
BACKEND_SETS = {
    "local": [],
    "slurm": ["cluster.nodes=2", "cluster.procs_per_node=1", "cluster.slurm.runtime=bare"],
    "eks": ["image.registry=r.example", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data"],
}


def median_seconds(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    mtk = [sys.executable, "-m", "mtk"]
    base = median_seconds([sys.executable, "-c", "pass"], args.repeat)
    rows = [("python -c pass", base, None), ("mtk --help", median_seconds([*mtk, "--help"], args.repeat), 0.2)]
    with tempfile.TemporaryDirectory() as tmp:
        for backend, sets in BACKEND_SETS.items():
            argv = [*mtk, "launch", TINY, "--backend", backend, "--dry-run", "--run-dir", f"{tmp}/{backend}"]
            for s in sets:
                argv += ["--set", s]
            rows.append((f"mtk launch --dry-run --backend {backend}", median_seconds(argv, args.repeat), 0.5))
    print(f"{'command':<42} {'median s':>9} {'× python':>9} {'goal s':>7}")
    for name, seconds, goal in rows:
        ok = "" if goal is None else ("  ok" if seconds <= goal else "  OVER")
        print(f"{name:<42} {seconds:>9.3f} {seconds / base:>9.1f} {goal or '':>7}{ok}")


if __name__ == "__main__":
    main()
