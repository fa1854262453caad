"""On a GPU: mtk's engine trains in bf16 with a falling loss, and a resume from its own checkpoint gives the
losses of the uninterrupted run.

    python benchmarks/gpu_resume.py [--model tiny|125m|both] [--iters 20] [--save-at 10] [--work-dir DIR]
        [--json FILE] [--dry-run]

Per model, two torchruns of ``mtk.training.worker`` on one GPU (mock data, bf16, dropout 0):

1. **straight**: ``--iters`` iterations, a checkpoint every ``--save-at`` iterations;
2. **resumed**: a fresh checkpoint dir holding only the straight run's ``iter_<save-at>`` and a tracker naming it
   (what an interrupted run leaves), the same job run again: it loads and trains ``save-at+1 .. iters``.

Prints per model: first/last losses, whether the loss fell (mean of the last quarter below the first quarter's
by > 0.05), and for iterations ``save-at+1 .. iters`` how many losses are bit-equal between the two runs and the
largest absolute difference. Exit status 1 when a loss did not fall or a resumed loss differs by more than
``--tolerance`` (default 0: bit-equal; GPU kernels chosen at start can differ between processes only where
cuBLAS/cuDNN pick non-deterministic algorithms, which the figure then shows).

Models: ``tiny`` (mtk's tiny preset) and ``125m`` (12 layers, hidden 768, 12 heads, seq 1024, micro batch 8,
global batch 64). ``--device cpu`` runs the same check on the CPU (gloo). ``--dry-run`` writes the jobs and
prints the commands (no GPU needed). A model whose run fails is reported and the next one still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

COMMON = ["cluster.procs_per_node=1", "parallel.tp=1", "parallel.pp=1",
          "parallel.sequence_parallel=false", "train.precision=bf16", "train.log_interval=1",
          "train.eval_interval=null", "train.tensorboard=false", "train.lr_warmup_iters=2",
          "train.checkpoint.save_on_exit=false", "train.checkpoint.load=true", "data.num_workers=2",
          "model.hidden_dropout=0.0", "model.attention_dropout=0.0", "debug.env_dump=false"]

MODELS: dict[str, list[str]] = {
    "tiny": ["model.preset=tiny", "train.micro_batch_size=4", "train.global_batch_size=16",
             "train.lr=1.0e-3", "train.min_lr=1.0e-4"],
    "125m": ["model.preset=null", "model.arch=gpt", "model.num_layers=12", "model.hidden_size=768",
             "model.num_attention_heads=12", "model.seq_length=1024", "model.max_position_embeddings=1024",
             "model.vocab_size=50257", "train.micro_batch_size=8", "train.global_batch_size=64",
             "train.lr=6.0e-4", "train.min_lr=6.0e-5"],
}


def write_job(name: str, run_dir: Path, iters: int, save_at: int, device: str = "gpu") -> Path:
    import yaml

    from mtk.spec.loader import apply_overrides, validate

    data = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    sets = [f"name=gpu-resume-{name}", f"cluster.device={device}", *COMMON, *MODELS[name], f"train.iterations={iters}",
            f"train.checkpoint.save_interval={save_at}", f"train.checkpoint.dir={run_dir / 'ckpt'}",
            f"data.dir={run_dir / 'data'}"]
    job = validate(apply_overrides(data, sets))
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "job.json"
    path.write_text(job.to_json())
    return path


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
            "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]


def run(run_dir: Path) -> None:
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    log = run_dir / "run.log"
    with open(log, "w") as out:
        rc = subprocess.run(command(run_dir), env=env, cwd=run_dir, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{run_dir.name}: worker exited {rc}; last lines:\n{tail}")


def losses(run_dir: Path) -> dict[int, float]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["iteration"]: float(r["lm_loss"]) for r in recs if r.get("kind") == "train"}


def seed_resume(straight: Path, resumed: Path, save_at: int) -> None:
    """What an interrupted run leaves: its checkpoint at ``save_at`` and the tracker naming it."""
    from mtk.training.checkpoint_layout import TRACKER, iter_dir_name

    src = straight / "ckpt" / iter_dir_name(save_at)
    if not src.is_dir():
        raise RuntimeError(f"the straight run saved no {src}")
    dst = resumed / "ckpt"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst / src.name)
    (dst / TRACKER).write_text(f"{save_at}\n")


def falling(values: list[float]) -> bool:
    k = max(3, len(values) // 4)
    return statistics.mean(values[-k:]) < statistics.mean(values[:k]) - 0.05


def check(name: str, work: Path, iters: int, save_at: int, tol: float, dry_run: bool,
          device: str = "gpu") -> dict | None:
    straight, resumed = work / f"{name}-straight", work / f"{name}-resumed"
    write_job(name, straight, iters, save_at, device)
    write_job(name, resumed, iters, save_at, device)
    print(f"== {name}: {iters} iterations, checkpoint every {save_at}; resume from {save_at}")
    print("   " + " ".join(command(straight)), flush=True)
    if dry_run:
        return None
    run(straight)
    seed_resume(straight, resumed, save_at)
    run(resumed)
    a, b = losses(straight), losses(resumed)
    tail = list(range(save_at + 1, iters + 1))
    missing = [i for i in tail if i not in a or i not in b]
    if missing or min(b) != save_at + 1:
        raise RuntimeError(f"{name}: iterations missing {missing}; the resumed run started at {min(b)}")
    diffs = [abs(a[i] - b[i]) for i in tail]
    series = [a[i] for i in sorted(a)]
    res = {"model": name, "first_loss": series[0], "last_loss": series[-1], "falling": falling(series),
           "resumed_iterations": len(tail), "bit_equal": sum(d == 0 for d in diffs), "max_abs_diff": max(diffs),
           "straight": a, "resumed": b}
    print(f"   loss {series[0]:.4f} -> {series[-1]:.4f} (falling: {res['falling']}); resumed "
          f"{save_at + 1}..{iters}: {res['bit_equal']}/{len(tail)} bit-equal, max |diff| {res['max_abs_diff']:.3g}")
    res["ok"] = res["falling"] and res["max_abs_diff"] <= tol
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=[*MODELS, "both"], default="both")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--save-at", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=0.0)
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                    help="cpu: the same check on this machine's CPU (gloo), to try the script without a GPU")
    args = ap.parse_args(argv)
    if not 0 < args.save_at < args.iters:
        ap.error("--save-at must lie between 0 and --iters")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="mtk-gpu-resume-"))
    results, failed = [], []
    for name in (MODELS if args.model == "both" else [args.model]):
        try:
            if r := check(name, work, args.iters, args.save_at, args.tolerance, args.dry_run, args.device):
                results.append(r)
        except RuntimeError as exc:
            print(f"   FAILED: {exc}", flush=True)
            failed.append(name)
    if args.json and results:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if not failed and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
