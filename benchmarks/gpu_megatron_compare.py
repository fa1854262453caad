"""mtk's engine vs Megatron-LM's own ``pretrain_gpt.py`` on a GPU: same GPT, batch, precision and data.

    python benchmarks/gpu_megatron_compare.py --megatron-lm DIR [--model 125m|1.3b|both]
        [--micro-batch N] [--global-batch N] [--iters 30] [--warmup 10] [--nproc 1] [--dry-run]

``DIR`` is a Megatron-LM checkout (``github:NVIDIA/Megatron-LM``) holding ``pretrain_gpt.py``,
``gpt_builders.py``, ``model_provider.py`` and ``megatron/``; it is put first on ``PYTHONPATH`` for the
reference run only. Both runs: bf16, mock data (NullTokenizer, vocab 50257 → 50304 padded), no dropout,
megatron-core's local layer spec (``--transformer-impl local``), Adam with clip 1.0, the same micro/global
batch, no checkpointing or evaluation, one torchrun of ``--nproc`` GPUs each. Models:

* ``125m``: 12 layers, hidden 768, 12 heads, seq 1024
* ``1.3b``: 24 layers, hidden 2048, 16 heads, seq 2048

An iteration's time is the median, after ``--warmup`` iterations, of the wall-clock between consecutive
iteration ends (mtk: the ``time`` of consecutive ``metrics.jsonl`` records; Megatron-LM: its
"elapsed time per iteration" with ``--log-interval 1``), so everything each loop does per step counts.
tokens/s = global batch × seq / step time; MFU = model FLOPs per step (the Megatron-LM formula both
report) / (step time × GPUs × ``--peak-tflops``). Prints both and mtk/Megatron-LM (≥ 1.00 is the goal).

``--dry-run`` writes the mtk job and prints both command lines without running anything (no GPU needed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VOCAB = 50257
H100_BF16_DENSE_TFLOPS = 989.4  # H100 whitepaper, SXM5: peak BF16 989.4 TFLOPS dense (1,978.9 with sparsity)


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    micro_batch: int  # a starting point for an 80 GB GPU; raise with --micro-batch until it no longer fits


MODELS = {
    "125m": Model("125m", 12, 768, 12, 1024, 16),
    "1.3b": Model("1.3b", 24, 2048, 16, 2048, 4),
}


@dataclass(frozen=True)
class Run:
    model: Model
    micro_batch: int
    global_batch: int
    iters: int
    nproc: int
    lr: float = 3.0e-4


def mtk_overrides(run: Run) -> list[str]:
    """``dotted.key=value`` overrides of examples/tiny.yaml that make the benchmark job."""
    m = run.model
    return [
        "name=bench-" + m.name.replace(".", "-"), "cluster.device=gpu", f"cluster.procs_per_node={run.nproc}",
        "model.preset=null", "model.arch=gpt", f"model.num_layers={m.layers}", f"model.hidden_size={m.hidden}",
        f"model.num_attention_heads={m.heads}", f"model.seq_length={m.seq}",
        f"model.max_position_embeddings={m.seq}", f"model.vocab_size={VOCAB}",
        "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
        "parallel.tp=1", "parallel.pp=1", "parallel.sequence_parallel=false",
        f"train.micro_batch_size={run.micro_batch}", f"train.global_batch_size={run.global_batch}",
        f"train.iterations={run.iters}", "train.precision=bf16", f"train.lr={run.lr}", f"train.min_lr={run.lr / 10:g}",
        "train.lr_warmup_iters=2", "train.lr_decay_style=cosine", "train.clip_grad=1.0",
        "train.weight_decay=0.1", "train.adam_beta1=0.9", "train.adam_beta2=0.95", "train.adam_eps=1e-8",
        "train.log_interval=1", "train.eval_interval=null",
        "train.tensorboard=false", "train.checkpoint.save_interval=null", "train.checkpoint.save_on_exit=false",
        "train.checkpoint.load=false", "data.num_workers=2", "debug.env_dump=false",
    ]


def write_mtk_job(run: Run, run_dir: Path) -> Path:
    import yaml
    from mtk.launcher.spec.loader import apply_overrides, validate

    data = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    job = validate(apply_overrides(data, [*mtk_overrides(run), f"data.dir={run_dir / 'data'}"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "job.json"
    path.write_text(job.to_json())
    return path


def mtk_command(run: Run, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={run.nproc}",
            "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]


def megatron_command(run: Run, megatron_lm: Path, plan) -> list[str]:
    """Megatron-LM's command line for ``run``, with mtk's device-plan choices that differ from Megatron-LM's
    defaults passed as flags (gradient-accumulation and softmax fusion, gradient reduce dtype, cross-entropy
    fusion), so both
    use the same kernels and numerics."""
    m = run.model
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={run.nproc}",
           str(megatron_lm / "pretrain_gpt.py"),
           "--transformer-impl", "local", "--num-layers", str(m.layers), "--hidden-size", str(m.hidden),
           "--num-attention-heads", str(m.heads), "--seq-length", str(m.seq),
           "--max-position-embeddings", str(m.seq), "--position-embedding-type", "learned_absolute",
           "--hidden-dropout", "0.0", "--attention-dropout", "0.0", "--init-method-std", "0.02",
           "--micro-batch-size", str(run.micro_batch), "--global-batch-size", str(run.global_batch),
           "--train-iters", str(run.iters), "--lr", str(run.lr), "--min-lr", f"{run.lr / 10:g}",
           "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--clip-grad", "1.0",
           "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-8",
           "--bf16",
           "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(VOCAB),
           "--no-create-attention-mask-in-dataloader", "--num-workers", "2",
           "--log-interval", "1", "--log-throughput", "--eval-iters", "0", "--eval-interval", str(10**6),
           "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
           "--distributed-backend", "nccl"]
    if not plan.gradient_accumulation_fusion:
        cmd.append("--no-gradient-accumulation-fusion")
    if not plan.persist_layer_norm:  # Megatron-LM's default is on; torch's LayerNorm refuses it
        cmd.append("--no-persist-layer-norm")
    if not plan.masked_softmax_fusion:
        cmd.append("--no-masked-softmax-fusion")
    if not plan.grad_reduce_in_fp32:
        cmd.append("--grad-reduce-in-bf16")
    if plan.cross_entropy_loss_fusion:
        cmd += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native"]
    return cmd


def megatron_env(megatron_lm: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(megatron_lm), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    return env


_MEGATRON_LINE = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?elapsed time per iteration \(ms\): ([0-9.]+)")


def megatron_step_ms(log: str, warmup: int) -> float:
    times = [float(ms) for it, ms in _MEGATRON_LINE.findall(log) if int(it) > warmup]
    if not times:
        raise RuntimeError("no Megatron-LM iteration lines after warm-up in its output")
    return statistics.median(times)


def mtk_step_ms(run_dir: Path, warmup: int) -> float:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    recs = sorted((r for r in recs if r["kind"] == "train"), key=lambda r: r["iteration"])
    deltas = [(b["time"] - a["time"]) * 1e3 for a, b in itertools.pairwise(recs) if a["iteration"] >= warmup]
    if not deltas:
        raise RuntimeError(f"no mtk iterations after warm-up in {run_dir / 'metrics.jsonl'}")
    return statistics.median(deltas)


def figures(run: Run, step_ms: float, peak_tflops: float) -> dict[str, float]:
    import yaml
    from mtk.launcher.spec.loader import apply_overrides, validate
    from mtk.training.metrics import flops_per_iteration
    from mtk.training.model import model_vocab_size

    data = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    job = validate(apply_overrides(data, mtk_overrides(run)))
    flops = flops_per_iteration(job, model_vocab_size(job))
    s = step_ms / 1e3
    return {"step_ms": step_ms, "tokens_per_s": run.global_batch * run.model.seq / s,
            "tflops_per_gpu": flops / (s * run.nproc * 1e12),
            "mfu": flops / (s * run.nproc * peak_tflops * 1e12)}


def _run(cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> str:
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    out = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd[:6])} ... exited {proc.returncode}; last lines:\n"
                           + "\n".join(out.splitlines()[-40:]))
    return out


def compare(run: Run, megatron_lm: Path, work: Path, warmup: int, peak: float, dry_run: bool) -> dict | None:
    from mtk.training.device_plan import plan_for_here

    run_dir = work / f"mtk-{run.model.name}"
    job_path = write_mtk_job(run, run_dir)
    from mtk.launcher.spec import load_job_json

    plan = plan_for_here(load_job_json(str(job_path)), gpu=True, dp_size=run.nproc)
    mtk_cmd = mtk_command(run, run_dir)
    meg_cmd = megatron_command(run, megatron_lm, plan)
    print(f"== {run.model.name}: micro batch {run.micro_batch}, global batch {run.global_batch}, "
          f"{run.nproc} GPU(s), {run.iters} iterations (median after {warmup})")
    print(f"mtk plan here: {plan.describe()}")
    print("mtk:         " + shlex.join(mtk_cmd))
    print("Megatron-LM: PYTHONPATH=" + shlex.quote(str(megatron_lm)) + " " + shlex.join(meg_cmd), flush=True)
    if dry_run:
        return None
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    _run(mtk_cmd, env, run_dir / "run.log", run_dir)
    meg_dir = work / f"megatron-{run.model.name}"
    meg_dir.mkdir(parents=True, exist_ok=True)
    meg_log = _run(meg_cmd, megatron_env(megatron_lm), meg_dir / "run.log", meg_dir)
    ours = figures(run, mtk_step_ms(run_dir, warmup), peak)
    ref = figures(run, megatron_step_ms(meg_log, warmup), peak)
    ratio = ours["tokens_per_s"] / ref["tokens_per_s"]
    for name, f in (("mtk", ours), ("Megatron-LM", ref)):
        print(f"{name:12s} step {f['step_ms']:9.1f} ms | {f['tokens_per_s']:11,.0f} tokens/s | "
              f"{f['tflops_per_gpu']:6.1f} TFLOP/s/GPU | MFU {f['mfu'] * 100:5.1f}%")
    print(f"mtk / Megatron-LM throughput: {ratio:.3f}x (goal >= 1.00, never below 0.97)", flush=True)
    return {"model": run.model.name, "micro_batch": run.micro_batch, "global_batch": run.global_batch,
            "mtk": ours, "megatron_lm": ref, "ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron-lm", type=Path, required=True, help="Megatron-LM checkout with pretrain_gpt.py")
    ap.add_argument("--model", choices=[*MODELS, "both"], default="both")
    ap.add_argument("--micro-batch", type=int, help="default: the model's starting point (125m: 16, 1.3b: 4)")
    ap.add_argument("--global-batch", type=int, help="default: 8 micro-batches per GPU")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--peak-tflops", type=float, default=H100_BF16_DENSE_TFLOPS,
                    help="dense bf16 peak per GPU for MFU (H100/H200 SXM: 989)")
    ap.add_argument("--work-dir", type=Path, help="default: a new temporary directory")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--dry-run", action="store_true", help="print both command lines; run nothing")
    args = ap.parse_args(argv)
    if not (args.megatron_lm / "pretrain_gpt.py").is_file() and not args.dry_run:
        ap.error(f"--megatron-lm {args.megatron_lm}: no pretrain_gpt.py there; fetch github:NVIDIA/Megatron-LM")
    if args.iters <= args.warmup + 2:
        ap.error(f"--iters ({args.iters}) must exceed --warmup ({args.warmup}) by at least 3")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="mtk-gpu-compare-"))
    results, failed = [], False
    for name in (MODELS if args.model == "both" else [args.model]):
        m = MODELS[name]
        mbs = args.micro_batch or m.micro_batch
        gbs = args.global_batch or mbs * 8 * args.nproc
        run = Run(m, mbs, gbs, args.iters, args.nproc)
        try:
            res = compare(run, args.megatron_lm.resolve(), work, args.warmup, args.peak_tflops, args.dry_run)
        except RuntimeError as exc:  # report it and go on to the next model: one device call measures both
            print(f"FAILED {name}: {exc}", flush=True)
            failed = True
            continue
        if res:
            results.append(res)
    if args.json and results:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
