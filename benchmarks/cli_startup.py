"""CLI start-up time: `mtk --help` and `mtk launch --dry-run` per backend, next to `python -c pass`; then the p5
example's `mtk validate` / `mtk launch --backend slurm --dry-run` with the megatron-core check cold (empty verdict
cache: the child imports megatron.core) and warm (verdict cached), next to TorchX's Slurm dry run.

Goal on the reference machine (2 cores): --help ≤ 0.2 s, dry-run (tiny, --no-megatron-check) ≤ 0.5 s; warm
`mtk launch --dry-run` of the p5 example ≤ 0.8× TorchX's dry run. Run on demand:
    python benchmarks/cli_startup.py [--repeat 15] [--cold-repeat 3] [--no-torchx]
Prints the median wall time (and CPU time of the process tree) of each command and the ratios, with two floors
beside them: the interpreter with pydantic's ``BaseModel`` imported, and with mtk's spec models built (what every
command that reads a spec pays before reading it).

TorchX (pinned ``TORCHX``) is installed by this script into its own venv, ``benchmarks/.venvs/torchx``
(git-ignored; never a dependency of mtk): ``python -m venv`` + ``pip install``. Every timed command runs with
bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed, as on a user's machine) after one untimed warm-up run,
so neither side pays for compiling its sources; each gets its own ``XDG_CACHE_HOME`` (the verdict cache lives
there). Rounds are interleaved (every command once per round) so a change in machine load hits all alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "examples" / "tiny.yaml")
P5 = str(ROOT / "examples" / "gpt-7.5b-p5-slurm.yaml")
TORCHX = "0.7.0"
TORCHX_VENV = ROOT / "benchmarks" / ".venvs" / "torchx"
BACKEND_SETS = {
    "local": [],
    "slurm": ["cluster.nodes=2", "cluster.procs_per_node=1", "cluster.slurm.runtime=bare"],
    "eks": ["image.registry=r.example", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data"],
}


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the command and every process it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_env(**extra: str) -> dict[str, str]:
    """This environment with bytecode caching on (as on a user's machine) plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, **extra}


def median_seconds(argv: list[str], repeat: int, env: dict[str, str]) -> float:
    """Median wall time after one untimed warm-up; a ``{n}`` in an argument becomes the repetition's number (a
    fresh run dir each time: a launch refuses a run dir that already holds a run)."""
    runs = [timed([a.replace("{n}", str(n)) for a in argv], env)[0] for n in range(-1, repeat)]
    return statistics.median(runs[1:])


def torchx_bin() -> Path:
    """``torchx`` from the benchmark's own venv, installed on first use."""
    exe = TORCHX_VENV / "bin" / "torchx"
    stamp = TORCHX_VENV / "mtk-bench.stamp"
    if exe.exists() and stamp.exists() and stamp.read_text() == TORCHX:
        return exe
    print(f"installing torchx=={TORCHX} into {TORCHX_VENV}", flush=True)
    shutil.rmtree(TORCHX_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(TORCHX_VENV)], check=True)
    subprocess.run([str(TORCHX_VENV / "bin" / "python"), "-m", "pip", "install", "-q", f"torchx=={TORCHX}"],
                   check=True)
    stamp.write_text(TORCHX)
    return exe


def startup_rows(repeat: int) -> None:
    """The original table: interpreter start-up, --help, and a dry run per backend (tiny example)."""
    mtk = [sys.executable, "-m", "mtk"]
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env(XDG_CACHE_HOME=f"{tmp}/cache")
        base = median_seconds([sys.executable, "-c", "pass"], repeat, env)
        rows = [("python -c pass", base, None), ("mtk --help", median_seconds([*mtk, "--help"], repeat, env), 0.2)]
        for backend, sets in BACKEND_SETS.items():
            argv = [*mtk, "launch", TINY, "--backend", backend, "--dry-run", "--run-dir", f"{tmp}/{backend}-{{n}}",
                    "--no-megatron-check"]
            for s in sets:
                argv += ["--set", s]
            rows.append((f"mtk launch --dry-run --backend {backend}", median_seconds(argv, repeat, env), 0.5))
    print(f"{'command':<42} {'median s':>9} {'× python':>9} {'goal s':>7}")
    for name, seconds, goal in rows:
        ok = "" if goal is None else ("  ok" if seconds <= goal else "  OVER")
        print(f"{name:<42} {seconds:>9.3f} {seconds / base:>9.1f} {goal or '':>7}{ok}")


def check_cache_rows(repeat: int, cold_repeat: int, with_torchx: bool) -> None:
    """p5 example: cold / warm verdict cache for validate and launch --dry-run, TorchX's Slurm dry run beside."""
    mtk = [sys.executable, "-m", "mtk"]
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text("print('hello')\n")
        warm_env = bench_env(XDG_CACHE_HOME=f"{tmp}/warm-cache")
        commands = {
            "mtk validate p5": [*mtk, "validate", P5, "--backend", "slurm", "-q"],
            "mtk launch p5 --dry-run": [*mtk, "launch", P5, "--backend", "slurm", "--dry-run", "--out",
                                        f"{tmp}/preview"],
            "mtk launch p5 --dry-run --no-megatron-check": [*mtk, "launch", P5, "--backend", "slurm", "--dry-run",
                                                            "--out", f"{tmp}/preview", "--no-megatron-check"],
        }
        # the floor under any spec-validating command: the interpreter with pydantic's BaseModel, then with mtk's
        # spec models built (what every `validate`/`launch` pays before it reads a spec)
        commands["floor: python + pydantic BaseModel"] = [sys.executable, "-c", "from pydantic import BaseModel"]
        commands["floor: python + mtk's spec models built"] = [sys.executable, "-c", "import mtk.spec"]
        if with_torchx:
            # the same shape as the p5 example: 2 nodes × 8 processes, torchrun under srun
            commands["torchx run --scheduler slurm --dryrun dist.ddp"] = [
                str(torchx_bin()), "run", "--scheduler", "slurm", "--dryrun", "dist.ddp", "-j", "2x8",
                "--script", str(script)]
        for argv in commands.values():  # warm-up: bytecode written, the warm cache filled
            timed(argv, warm_env, tmp)
        cold: dict[str, list[tuple[float, float]]] = {"mtk validate p5": [], "mtk launch p5 --dry-run": []}
        warm: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for r in range(max(repeat, cold_repeat)):
            if r < cold_repeat:
                for name, runs in cold.items():
                    runs.append(timed(commands[name], bench_env(XDG_CACHE_HOME=tempfile.mkdtemp(dir=tmp)), tmp))
            if r < repeat:
                for name, runs in warm.items():
                    runs.append(timed(commands[name], warm_env, tmp))
        split = import_split(commands["mtk launch p5 --dry-run"], warm_env, tmp)
    rows = [(f"{name} (cold: empty cache)", runs) for name, runs in cold.items()]
    rows += [(f"{name} (warm: cached)" if name in cold else name, runs) for name, runs in warm.items()]
    tx = next((runs for name, runs in warm.items() if name.startswith("torchx")), None)
    ref = statistics.median(w for w, _ in tx) if tx else None
    ref_cpu = statistics.median(c for _, c in tx) if tx else None
    print(f"\n{'command':<56} {'runs':>4} {'wall s':>7} {'CPU s':>7} {'× torchx':>9} {'CPU × tx':>9}")
    for name, runs in rows:
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ratio = f"{wall / ref:>9.2f}" if ref else f"{'':>9}"
        ratio_cpu = f"{cpu / ref_cpu:>9.2f}" if ref_cpu else f"{'':>9}"
        print(f"{name:<56} {len(runs):>4} {wall:>7.3f} {cpu:>7.3f} {ratio} {ratio_cpu}")
    print(split)
    if ref:
        launch = statistics.median(w for w, _ in warm["mtk launch p5 --dry-run"])
        verdict = "ok" if launch <= 0.8 * ref else "OVER"
        print(f"goal: warm mtk launch --dry-run ≤ 0.8× torchx's dry run: {launch / ref:.2f}× ({verdict})")


def import_split(argv: list[str], env: dict[str, str], cwd: str, rounds: int = 5) -> str:
    """Where a command's imports go: the self time of every module it imports, summed per top-level package
    (standard library as one; mtk's own includes building its pydantic spec models), the least of ``rounds``
    runs under ``-X importtime``, largest first."""
    best: dict[str, int] = {}
    for _ in range(rounds):
        proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=cwd, capture_output=True,
                              text=True, check=True)
        seen: dict[str, int] = {}
        for line in proc.stderr.splitlines():
            parts = line.split("|")
            if not line.startswith("import time:") or len(parts) != 3 or not parts[1].strip().isdigit():
                continue
            root = parts[2].strip().split(".")[0]
            root = "stdlib" if root.lstrip("_") in sys.stdlib_module_names or root in sys.stdlib_module_names \
                else root
            seen[root] = seen.get(root, 0) + int(parts[0].split(":")[1])
        best = {k: min(v, best.get(k, v)) for k, v in seen.items()}
    total = sum(best.values())
    return (f"imports of the warm `mtk launch p5 --dry-run` (self time per package, least of {rounds} runs, ms; "
            f"all: {total / 1000:.0f}): " + ", ".join(f"{k} {v / 1000:.0f}" for k, v in
                                                       sorted(best.items(), key=lambda kv: -kv[1])[:9]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per command (warm)")
    parser.add_argument("--cold-repeat", type=int, default=3, help="timed cold runs (each imports megatron.core)")
    parser.add_argument("--no-torchx", action="store_true", help="skip TorchX (no venv, no ratios)")
    parser.add_argument("--only-check-cache", action="store_true", help="only the p5 cold/warm table")
    args = parser.parse_args()
    if not args.only_check_cache:
        startup_rows(args.repeat)
    check_cache_rows(args.repeat, args.cold_repeat, not args.no_torchx)


if __name__ == "__main__":
    main()
