"""Save time of the distributed optimizer's two checkpoint layouts: ``fully_reshardable`` (opt-in,
``train.checkpoint.fully_reshardable``; gathers the state over data-parallel ranks and writes one tensor per
parameter) vs ``dp_reshardable`` (mtk's and Megatron-LM's default: each rank writes its flat buffers as they are).

    python benchmarks/checkpoint_save.py [--iters 6] [--rounds 2] [--nproc 2] [--set model.hidden_size=256 ...]

Each round trains examples/tiny.yaml (+ overrides) with the distributed optimizer, saving every iteration,
once per layout (alternating, so machine load hits both alike), and reads the engine's own "[checkpoint]
saved iteration N ... in S s" lines (state dict build + write + publish). The first save of a run is
dropped (one-time writer start-up). Prints the median per layout and the ratio fully_reshardable /
dp_reshardable.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SAVED = re.compile(r"\[checkpoint\] saved iteration (\d+) to \S+ in ([0-9.]+)s")


def save_times(work: Path, fully: bool, args: argparse.Namespace) -> list[float]:
    from mtk.spec.loader import apply_overrides, validate

    run_dir = work / f"{'fully' if fully else 'dp'}-{len(list(work.iterdir()))}"
    run_dir.mkdir()
    sets = ["data.num_workers=0", f"data.dir={run_dir / 'data'}", "train.eval_interval=null", "debug.env_dump=false",
            "parallel.tp=1", "parallel.distributed_optimizer=true", f"train.iterations={args.iters}",
            "train.checkpoint.save_interval=1", f"train.checkpoint.fully_reshardable={str(fully).lower()}",
            f"cluster.procs_per_node={args.nproc}", *args.set]
    job = validate(apply_overrides(yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text()), sets))
    (run_dir / "job.json").write_text(job.to_json())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
           "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=run_dir, env={"OMP_NUM_THREADS": "1", **os.environ})
    if out.returncode != 0:
        sys.exit(f"run failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    times = [float(m.group(2)) for m in SAVED.finditer(out.stdout + out.stderr)]
    return times[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="extra dotted.key=value overrides")
    args = ap.parse_args()
    got: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="mtk-ckpt-bench-") as tmp:
        for _ in range(args.rounds):
            for fully in (False, True):
                got[fully] += save_times(Path(tmp), fully, args)
    dp, full = statistics.median(got[False]), statistics.median(got[True])
    print(f"dp_reshardable    median save {dp:.3f}s over {len(got[False])} saves")
    print(f"fully_reshardable median save {full:.3f}s over {len(got[True])} saves")
    print(f"ratio fully_reshardable / dp_reshardable = {full / dp:.2f}x")


if __name__ == "__main__":
    main()
