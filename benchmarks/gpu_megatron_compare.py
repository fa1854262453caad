"""mtk's engine vs Megatron-LM's own ``pretrain_gpt.py`` on a GPU: same GPT, batch, precision and data.

    python benchmarks/gpu_megatron_compare.py --megatron-lm DIR [--model 125m,1.3b,llama-1b|both|all]
        [--micro-batch N] [--global-batch N] [--max-micro-batch] [--iters 30] [--warmup 10] [--nproc 1]
        [--probe-sdpa] [--json FILE] [--dry-run]

``DIR`` is a Megatron-LM checkout (``github:NVIDIA/Megatron-LM``) holding ``pretrain_gpt.py``,
``gpt_builders.py``, ``model_provider.py`` and ``megatron/``; it is put first on ``PYTHONPATH`` for the
reference run only. Both runs: bf16, mock data (NullTokenizer, vocab 50257 → 50304 padded), no dropout,
megatron-core's local layer spec (``--transformer-impl local``), Adam with clip 1.0, the same micro/global
batch, no checkpointing or evaluation, one torchrun of ``--nproc`` GPUs each. mtk runs with its default
``model.attention_backend: auto`` (torch SDPA where Transformer Engine is absent) and its device plan's Adam;
Megatron-LM's local spec has only its unfused attention. Models:

* ``125m``: 12 layers, hidden 768, 12 heads, seq 1024 (GPT-2 style: learned positions, GELU, LayerNorm)
* ``1.3b``: 24 layers, hidden 2048, 16 heads, seq 2048 (GPT-2 style)
* ``llama-1b``: 16 layers, hidden 2048, FFN 8192, 32 heads in 8 KV groups, seq 4096, vocab 128256, RoPE (base
  500000) + SwiGLU + RMSNorm, no biases, tied embeddings (Llama-3.2-1B's shape; 1.24 B parameters)

``--max-micro-batch`` adds an mtk-only run per model at the largest micro-batch measured to fit on an 80 GB GPU
with SDPA (which frees the s×s scores), same global batch, with its MFU. ``--probe-sdpa`` first reports which of
torch's SDPA kernels (flash, memory-efficient, cuDNN) accept each model's attention shapes in bf16.

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
    global_batch: int | None = None  # default: 8 micro-batches per GPU
    max_micro_batch: int | None = None  # mtk with SDPA, same global batch (--max-micro-batch)
    llama: bool = False
    ffn: int | None = None
    groups: int | None = None
    vocab: int = VOCAB


MODELS = {
    "125m": Model("125m", 12, 768, 12, 1024, 16, max_micro_batch=32),
    "1.3b": Model("1.3b", 24, 2048, 16, 2048, 4, max_micro_batch=8),
    "llama-1b": Model("llama-1b", 16, 2048, 32, 4096, 1, global_batch=8, max_micro_batch=2, llama=True, ffn=8192,
                      groups=8, vocab=128256),
}
LLAMA_ROPE_BASE = 500000


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
        f"model.max_position_embeddings={m.seq}", f"model.vocab_size={m.vocab}",
        "model.hidden_dropout=0.0", "model.attention_dropout=0.0", *llama_overrides(m),
        "parallel.tp=1", "parallel.pp=1", "parallel.sequence_parallel=false",
        f"train.micro_batch_size={run.micro_batch}", f"train.global_batch_size={run.global_batch}",
        f"train.iterations={run.iters}", "train.precision=bf16", f"train.lr={run.lr}", f"train.min_lr={run.lr / 10:g}",
        "train.lr_warmup_iters=2", "train.lr_decay_style=cosine", "train.clip_grad=1.0",
        "train.weight_decay=0.1", "train.adam_beta1=0.9", "train.adam_beta2=0.95", "train.adam_eps=1e-8",
        "train.log_interval=1", "train.eval_interval=null",
        "train.tensorboard=false", "train.checkpoint.save_interval=null", "train.checkpoint.save_on_exit=false",
        "train.checkpoint.load=false", "data.num_workers=2", "debug.env_dump=false",
    ]


def llama_overrides(m: Model) -> list[str]:
    if not m.llama:
        return []
    return ["model.arch=llama", "model.position_embedding=rope", f"model.rotary_base={LLAMA_ROPE_BASE}",
            "model.normalization=RMSNorm", "model.activation=swiglu", "model.add_bias_linear=false",
            f"model.ffn_hidden_size={m.ffn}", f"model.num_query_groups={m.groups}", "model.untie_embeddings=false"]


def llama_flags(m: Model) -> list[str]:
    """Megatron-LM's flags for the same Llama-style model (what mtk's checkpoint args record for it)."""
    if not m.llama:
        return ["--position-embedding-type", "learned_absolute"]
    return ["--position-embedding-type", "rope", "--no-position-embedding", "--rotary-base", str(LLAMA_ROPE_BASE),
            "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--ffn-hidden-size", str(m.ffn),
            "--group-query-attention", "--num-query-groups", str(m.groups)]


def write_mtk_job(run: Run, run_dir: Path) -> Path:
    import yaml

    from mtk.spec.loader import apply_overrides, validate

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
           "--max-position-embeddings", str(m.seq), *llama_flags(m),
           "--hidden-dropout", "0.0", "--attention-dropout", "0.0", "--init-method-std", "0.02",
           "--micro-batch-size", str(run.micro_batch), "--global-batch-size", str(run.global_batch),
           "--train-iters", str(run.iters), "--lr", str(run.lr), "--min-lr", f"{run.lr / 10:g}",
           "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--clip-grad", "1.0",
           "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-8",
           "--bf16",
           "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab),
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
    if m.llama and not plan.apply_rope_fusion:  # Megatron-LM's default is on; its fused RoPE needs TE
        cmd.append("--no-rope-fusion")
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


_MEGATRON_LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: ([0-9.eE+-]+)")


def megatron_loss(log: str, iteration: int) -> float | None:
    found = [float(v) for it, v in _MEGATRON_LOSS.findall(log) if int(it) == iteration]
    return found[-1] if found else None


def mtk_loss(run_dir: Path, iteration: int) -> float | None:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    found = [r["lm_loss"] for r in recs if r["kind"] == "train" and r["iteration"] == iteration]
    return found[-1] if found else None


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
    from mtk.training.metrics import flops_per_iteration
    from mtk.training.model import model_vocab_size

    from mtk.spec.loader import apply_overrides, validate

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


LOSS_AT = 20  # the iteration whose loss both sides report (goal: within 1e-3 relative)


def _mtk_job_and_plan(run: Run, run_dir: Path):
    from mtk.training.device_plan import plan_for_here

    from mtk.spec import load_job_json

    job_path = write_mtk_job(run, run_dir)
    return plan_for_here(load_job_json(str(job_path)), gpu=True, dp_size=run.nproc)


def _print_figures(name: str, f: dict) -> None:
    print(f"{name:12s} step {f['step_ms']:9.1f} ms | {f['tokens_per_s']:11,.0f} tokens/s | "
          f"{f['tflops_per_gpu']:6.1f} TFLOP/s/GPU | MFU {f['mfu'] * 100:5.1f}%", flush=True)


def _train_mtk(run: Run, run_dir: Path, warmup: int, peak: float, label: str) -> dict:
    """One mtk run of ``run`` in ``run_dir`` (job already written); its figures, printed under ``label``."""
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    _run(mtk_command(run, run_dir), env, run_dir / "run.log", run_dir)
    ours = figures(run, mtk_step_ms(run_dir, warmup), peak)
    _print_figures(label, ours)
    return ours


def compare(run: Run, megatron_lm: Path, work: Path, warmup: int, peak: float, dry_run: bool) -> dict | None:
    run_dir = work / f"mtk-{run.model.name}"
    plan = _mtk_job_and_plan(run, run_dir)
    mtk_cmd = mtk_command(run, run_dir)
    meg_cmd = megatron_command(run, megatron_lm, plan)
    print(f"== {run.model.name}: micro batch {run.micro_batch}, global batch {run.global_batch}, "
          f"{run.nproc} GPU(s), {run.iters} iterations (median after {warmup})")
    print(f"mtk plan here: {plan.describe()}")
    print("mtk:         " + shlex.join(mtk_cmd))
    print("Megatron-LM: PYTHONPATH=" + shlex.quote(str(megatron_lm)) + " " + shlex.join(meg_cmd), flush=True)
    if dry_run:
        return None
    ours = _train_mtk(run, run_dir, warmup, peak, "mtk")
    meg_dir = work / f"megatron-{run.model.name}"
    meg_dir.mkdir(parents=True, exist_ok=True)
    meg_log = _run(meg_cmd, megatron_env(megatron_lm), meg_dir / "run.log", meg_dir)
    ref = figures(run, megatron_step_ms(meg_log, warmup), peak)
    _print_figures("Megatron-LM", ref)
    ratio = ours["tokens_per_s"] / ref["tokens_per_s"]
    loss = {"mtk": mtk_loss(run_dir, LOSS_AT), "megatron_lm": megatron_loss(meg_log, LOSS_AT)}
    rel = abs(loss["mtk"] - loss["megatron_lm"]) / abs(loss["megatron_lm"]) if None not in loss.values() else None
    print(f"mtk / Megatron-LM throughput: {ratio:.3f}x (mtk attention: {plan.attention}, Adam: {plan.adam})")
    print(f"loss at iteration {LOSS_AT}: mtk {loss['mtk']} | Megatron-LM {loss['megatron_lm']} | relative difference "
          f"{'n/a' if rel is None else f'{rel:.2e}'} (goal <= 1e-3)", flush=True)
    return {"model": run.model.name, "micro_batch": run.micro_batch, "global_batch": run.global_batch,
            "attention": plan.attention, "adam": plan.adam, "mtk": ours, "megatron_lm": ref, "ratio": ratio,
            "loss_at": LOSS_AT, "loss": loss, "loss_rel_diff": rel}


def mtk_only(run: Run, work: Path, warmup: int, peak: float, dry_run: bool) -> dict | None:
    """mtk alone at ``run.micro_batch`` (the largest that fits with SDPA), same global batch."""
    run_dir = work / f"mtk-{run.model.name}-mb{run.micro_batch}"
    plan = _mtk_job_and_plan(run, run_dir)
    cmd = mtk_command(run, run_dir)
    print(f"== {run.model.name}, mtk only: micro batch {run.micro_batch}, global batch {run.global_batch}")
    print("mtk:         " + shlex.join(cmd), flush=True)
    if dry_run:
        return None
    ours = _train_mtk(run, run_dir, warmup, peak, f"mtk mb{run.micro_batch}")
    return {"model": run.model.name, "micro_batch": run.micro_batch, "global_batch": run.global_batch,
            "attention": plan.attention, "adam": plan.adam, "mtk": ours, "loss": {"mtk": mtk_loss(run_dir, LOSS_AT)}}


def probe_sdpa(models: list[Model]) -> dict[str, dict[str, str]]:
    """Which SDPA kernels take each model's attention (bf16, causal, GQA by ``enable_gqa``), forward + backward."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out: dict[str, dict[str, str]] = {}
    for m in models:
        groups, hd = m.groups or m.heads, m.hidden // m.heads
        q = torch.randn(m.micro_batch, m.heads, m.seq, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(m.micro_batch, groups, m.seq, hd, device="cuda", dtype=torch.bfloat16,
                            requires_grad=True) for _ in range(2))
        out[m.name] = {}
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            try:
                with sdpa_kernel([backend]):
                    out_ = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=groups != m.heads)
                    out_.sum().backward()
                torch.cuda.synchronize()
                out[m.name][backend.name] = "ok"
            except RuntimeError as exc:
                out[m.name][backend.name] = str(exc).splitlines()[0][:160]
        print(f"sdpa kernels for {m.name} (b={m.micro_batch}, heads {m.heads}/{groups}, seq {m.seq}, head dim {hd}): "
              + "; ".join(f"{k}: {v}" for k, v in out[m.name].items()), flush=True)
    return out


def _models(spec: str) -> list[str]:
    if spec == "both":
        return ["125m", "1.3b"]
    if spec == "all":
        return list(MODELS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"--model: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}, both or all")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron-lm", type=Path, required=True, help="Megatron-LM checkout with pretrain_gpt.py")
    ap.add_argument("--model", default="both", help=f"comma-separated, in order: {', '.join(MODELS)}; "
                    "both (125m,1.3b) or all")
    ap.add_argument("--micro-batch", type=int, help="default: the model's starting point (125m: 16, 1.3b: 4)")
    ap.add_argument("--global-batch", type=int, help="default: the model's, else 8 micro-batches per GPU")
    ap.add_argument("--max-micro-batch", action="store_true",
                    help="also run mtk alone at the largest micro-batch that fits (same global batch)")
    ap.add_argument("--probe-sdpa", action="store_true", help="report which SDPA kernels take each model's shapes")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--peak-tflops", type=float, default=H100_BF16_DENSE_TFLOPS,
                    help="dense bf16 peak per GPU for MFU (H100/H200 SXM: 989)")
    ap.add_argument("--work-dir", type=Path, help="default: a new temporary directory")
    ap.add_argument("--json", type=Path, help="also write the results here (after every model)")
    ap.add_argument("--dry-run", action="store_true", help="print both command lines; run nothing")
    args = ap.parse_args(argv)
    if not (args.megatron_lm / "pretrain_gpt.py").is_file() and not args.dry_run:
        ap.error(f"--megatron-lm {args.megatron_lm}: no pretrain_gpt.py there; fetch github:NVIDIA/Megatron-LM")
    if args.iters <= args.warmup + 2:
        ap.error(f"--iters ({args.iters}) must exceed --warmup ({args.warmup}) by at least 3")
    names = _models(args.model)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="mtk-gpu-compare-"))
    results: list[dict] = []
    failed = False
    if args.probe_sdpa and not args.dry_run:
        results.append({"sdpa_kernels": probe_sdpa([MODELS[n] for n in names])})
    for name in names:
        m = MODELS[name]
        mbs = args.micro_batch or m.micro_batch
        gbs = args.global_batch or m.global_batch or mbs * 8 * args.nproc
        runs = [(compare, Run(m, mbs, gbs, args.iters, args.nproc))]
        if args.max_micro_batch and m.max_micro_batch and gbs % (m.max_micro_batch * args.nproc) == 0:
            runs.append((mtk_only, Run(m, m.max_micro_batch, gbs, args.iters, args.nproc)))
        for fn, run in runs:
            try:
                if fn is compare:
                    res = compare(run, args.megatron_lm.resolve(), work, args.warmup, args.peak_tflops, args.dry_run)
                else:
                    res = mtk_only(run, work, args.warmup, args.peak_tflops, args.dry_run)
            except RuntimeError as exc:  # report it and go on: one device call measures them all
                print(f"FAILED {name} (micro batch {run.micro_batch}): {exc}", flush=True)
                failed = True
                continue
            if res:
                results.append(res)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
