"""validate's memory gate against the memory a GPU really uses: estimate vs measured peak, per layout.

    python benchmarks/memory_gate.py                  # the estimate side only (any machine, no GPU)
    python benchmarks/memory_gate.py --measure        # on a GPU: also train each layout and measure its peak
        [--model 125m,1.3b,llama-1b] [--micro-batches 1,2,4] [--iters 8] [--json FILE]

The gate (``mtk.spec.memory_checks``) refuses a spec whose estimate (weights + grads + optimizer state +
activations, :mod:`mtk.figures`) exceeds the GPU. A gate that over-estimates rejects what would run; one that
under-estimates lets a job queue for hours and then die on its first step. This prints, for the GPU benchmark
models of ``gpu_megatron_compare.py`` (125m, 1.3b, llama-1b) at several micro-batch sizes, with and without
full recompute (and the distributed optimizer where it applies: it shards state over data-parallel ranks, so
with one GPU it changes nothing and is left out), validate's estimate beside ``torch.cuda.max_memory_allocated``
and ``max_memory_reserved`` at steady state (after ``--iters`` iterations of mtk's own engine, one GPU, bf16).

The measured side runs ``mtk.training.worker`` under torchrun with a probe (``_memory_probe``) that samples the
allocator's peaks from a thread in the rank and writes them beside the run; nothing in the engine changes.
The ratio column is estimate ÷ measured reserved: the gate's own docstring says what it leaves out (CUDA
context, NCCL buffers, fragmentation), so a ratio under 1 by more than that margin is a gate that passes what
will not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_megatron_compare import MODELS, Run, mtk_overrides  # noqa: E402

GIB = 1024**3


def job_for(run: Run, recompute: str, run_dir: Path):
    """The mtk job that gpu_megatron_compare trains, with ``train.recompute`` set and checkpointing off."""
    import yaml

    from mtk.spec.loader import apply_overrides, validate

    data = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    overrides = [*mtk_overrides(run), f"data.dir={run_dir / 'data'}", f"train.recompute={recompute}",
                 "cluster.allow_memory_overcommit=true"]  # the estimate is printed; the gate must not stop a probe
    return validate(apply_overrides(data, overrides))


def estimate(job) -> dict[str, float]:
    from mtk.spec.memory_checks import estimate_gib

    total, state, activations = estimate_gib(job)
    return {"estimate_gib": total, "state_gib": state, "activation_gib": activations}


def measure(job, run_dir: Path, iters: int) -> dict[str, float]:
    """Train ``job`` for a few iterations on this machine's GPU; the allocator's peaks in GiB."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.json").write_text(job.to_json())
    peaks = run_dir / "memory_peaks.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           str(REPO / "benchmarks" / "_memory_probe.py"), str(peaks),
           "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]
    env = dict(os.environ, CUDA_DEVICE_MAX_CONNECTIONS="1", PYTHONPATH=str(REPO))
    with open(run_dir / "run.log", "w") as log:
        proc = subprocess.run(cmd, env=env, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT)
    if not peaks.is_file():
        tail = "\n".join((run_dir / "run.log").read_text(errors="replace").splitlines()[-15:])
        return {"error": f"exit {proc.returncode}: {tail[-400:]}"}  # type: ignore[dict-item]
    got = json.loads(peaks.read_text())
    return {"allocated_gib": got["allocated"] / GIB, "reserved_gib": got["reserved"] / GIB}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="125m,1.3b,llama-1b")
    ap.add_argument("--micro-batches", default="1,2,4", help="comma-separated micro-batch sizes")
    ap.add_argument("--recompute", default="none,full", help="comma-separated train.recompute values")
    ap.add_argument("--measure", action="store_true", help="train each layout on this machine's GPU")
    ap.add_argument("--iters", type=int, default=8, help="iterations per measured layout (steady state)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--work-dir", type=Path)
    args = ap.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="mtk-memory-gate-"))
    rows = []
    print(f"{'model':9s} {'mb':>3s} {'recompute':9s} {'estimate':>9s} {'state':>7s} {'activ.':>7s} "
          f"{'allocated':>9s} {'reserved':>9s} {'est/res':>7s}  (GiB)", flush=True)
    for name in args.model.split(","):
        model = MODELS[name]
        for mb in (int(x) for x in args.micro_batches.split(",")):
            for recompute in args.recompute.split(","):
                run = Run(replace(model, micro_batch=mb), mb, mb * 2, args.iters, 1)
                run_dir = work / f"{name}-mb{mb}-{recompute}"
                job = job_for(run, recompute, run_dir)
                row: dict = {"model": name, "micro_batch": mb, "recompute": recompute, **estimate(job)}
                if args.measure:
                    row.update(measure(job, run_dir, args.iters))
                rows.append(row)
                measured = (f"{row['allocated_gib']:9.2f} {row['reserved_gib']:9.2f} "
                            f"{row['estimate_gib'] / row['reserved_gib']:7.2f}" if "reserved_gib" in row
                            else f"{row.get('error', 'not measured (no --measure)')[:60]}")
                print(f"{name:9s} {mb:3d} {recompute:9s} {row['estimate_gib']:9.2f} {row['state_gib']:7.2f} "
                      f"{row['activation_gib']:7.2f} {measured}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
