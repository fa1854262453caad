"""Median step time of mtk's engine vs a bare megatron.core loop (same model, data and process count).

    python benchmarks/train_step.py [--iters 40] [--nproc 2] [--set parallel.tp=2 ...]

Both runs use torchrun with the same job (examples/tiny.yaml + overrides, mock data). The time of an
iteration is wall-clock between consecutive iteration ends, so everything the engine adds per step
(loss/flag all-reduce, trigger checks, metrics, logging) is counted; the first ``--warmup`` iterations are
dropped. The bare loop builds the model with the same TransformerConfig and layer spec, wraps it in
Megatron DDP, and calls get_forward_backward_func + optimizer.step — nothing else. On CPU both need the
compat layer (megatron.core cannot run on CPU without it). Goal: engine/bare ≤ 1.05.

    python benchmarks/train_step.py --resilience [--rounds 3]

instead compares the engine with the hang watchdog and straggler statistics on (gathered every 10
iterations, so the 2 × world extra values ride on the loop's all-reduce several times per run) against both
off, alternating rounds; goal: on/off ≤ 1.01. On a shared machine the end-to-end rounds are noisy, so it
also times the per-iteration hook work itself in-process (one heartbeat beat, one straggler payload, the forward
wrapper per micro-batch, a gather every 10 iterations) and prints it as a fraction of the measured step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def bare_loop(job_path: str, out_path: str, iters: int) -> None:
    """One rank of the reference loop (run under torchrun)."""
    from mtk.training import compat

    compat.install()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from mtk.training import data, device_plan, distributed, model, optim

    from mtk.spec import load_job_json

    job = load_job_json(job_path)
    distributed.init(job, cpu=True)
    info = data.TokenizerInfo(job.model.vocab_size, job.model.vocab_size - 1)
    plan = device_plan.plan(job, gpu=False, te=False)
    config = model.transformer_config(job, plan)
    chunks = optim.wrap_ddp(job, config, model.build_model(job, config, info.vocab_size, plan), plan)
    opt = optim.build_optimizer(job, chunks, plan)
    config.no_sync_func = chunks[0].no_sync
    config.finalize_model_grads_func = finalize_model_grads
    train_ds, _ = data.build_datasets(job, info)
    t = job.train
    dp = ps.get_data_parallel_world_size()
    it = data.batches(train_ds, data.ResumableSampler(len(train_ds), 0, t.micro_batch_size,
                                                      ps.get_data_parallel_rank(), dp), 0)

    def fwd(data_iterator, m):
        b = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items()}
        out = m(b["tokens"], b["position_ids"], None, labels=b["labels"])

        def loss_fn(output):
            mask = b["loss_mask"].view(-1).float()
            loss = torch.sum(output.float().view(-1) * mask) / mask.sum()
            return loss, {"lm loss": loss.detach()}

        return out, loss_fn

    ends = []
    for _ in range(iters):
        chunks[0].zero_grad_buffer()
        opt.zero_grad()
        get_forward_backward_func()(forward_step_func=fwd, data_iterator=it, model=chunks[0],
                                    num_microbatches=t.micro_batches(dp),
                                    seq_length=job.model.seq_length, micro_batch_size=t.micro_batch_size,
                                    decoder_seq_length=job.model.seq_length, forward_only=False)
        opt.step()
        ends.append(time.time())
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(ends))
    distributed.shutdown()


def _torchrun(nproc: int, args: list[str], log: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            timeout=1800).returncode
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (rc={rc}); see {log}")


def _median_step_ms(ends: list[float], warmup: int) -> float:
    diffs = [b - a for a, b in zip(ends[warmup:-1], ends[warmup + 1:], strict=True)]
    return statistics.median(diffs) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="job overrides, e.g. parallel.tp=2")
    ap.add_argument("--resilience", action="store_true", help="watchdog + straggler stats on vs off instead")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bare", nargs=2, metavar=("JOB", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare:
        bare_loop(args.bare[0], args.bare[1], args.iters)
        return 0

    from mtk.spec import load_job

    with tempfile.TemporaryDirectory(prefix="mtk-bench-") as tmp:
        root = Path(tmp)
        job = load_job(REPO / "examples" / "tiny.yaml", [
            f"train.iterations={args.iters}", "train.log_interval=1", "train.eval_interval=null",
            "train.checkpoint.save_interval=null", "train.checkpoint.save_on_exit=false",
            "train.tensorboard=false", "debug.env_dump=false", "data.num_workers=0",
            f"cluster.procs_per_node={args.nproc}", f"data.dir={root / 'data'}", *args.set])
        (root / "job.json").write_text(job.to_json())
        if args.resilience:
            return _resilience(args, root, job)
        results = {}
        # Alternate twice so background load on a shared machine hits both loops alike.
        for round_ in range(2):
            run_dir = root / f"engine{round_}"
            run_dir.mkdir()
            _torchrun(args.nproc, ["-m", "mtk.training.worker", "--job", str(root / "job.json"),
                                   "--run-dir", str(run_dir)], root / f"engine{round_}.log")
            recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
            results.setdefault("engine", []).append(
                _median_step_ms([r["time"] for r in recs if r["kind"] == "train"], args.warmup))
            out = root / f"bare{round_}.json"
            _torchrun(args.nproc, [__file__, "--iters", str(args.iters), "--bare", str(root / "job.json"),
                                   str(out)], root / f"bare{round_}.log")
            results.setdefault("bare", []).append(_median_step_ms(json.loads(out.read_text()), args.warmup))
    engine, bare = min(results["engine"]), min(results["bare"])
    p = job.parallel
    print(f"model: preset {job.model.preset}, seq {job.model.seq_length}, gbs {job.train.global_batch_size}, "
          f"mbs {job.train.micro_batch_size}; {args.nproc} procs tp={p.tp} pp={p.pp}; "
          f"{args.iters} iterations, first {args.warmup} dropped, best of 2 rounds")
    print(f"engine median step: {engine:.1f} ms   (rounds: {', '.join(f'{x:.1f}' for x in results['engine'])})")
    print(f"bare   median step: {bare:.1f} ms   (rounds: {', '.join(f'{x:.1f}' for x in results['bare'])})")
    print(f"ratio engine/bare: {engine / bare:.3f}x (goal <= 1.05x)")
    return 0


def _engine_ms(args, root: Path, name: str, job_file: Path) -> float:
    run_dir = root / name
    run_dir.mkdir()
    _torchrun(args.nproc, ["-m", "mtk.training.worker", "--job", str(job_file), "--run-dir", str(run_dir)],
              root / f"{name}.log")
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return _median_step_ms([r["time"] for r in recs if r["kind"] == "train"], args.warmup)


def _resilience(args, root: Path, job) -> int:
    """Engine step time with the watchdog and straggler statistics on vs off, alternating rounds."""
    variants = {}
    for name, on in (("on", True), ("off", False)):
        variant = job.model_copy(deep=True)
        variant.resilience.watchdog.enabled = on
        variant.resilience.stragglers.enabled = on
        variant.resilience.stragglers.interval = 10
        variants[name] = root / f"job-{name}.json"
        variants[name].write_text(variant.to_json())
    results: dict[str, list[float]] = {"on": [], "off": []}
    for round_ in range(args.rounds):
        for name in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
            results[name].append(_engine_ms(args, root, f"{name}{round_}", variants[name]))
    on, off = min(results["on"]), min(results["off"])
    hook_ms = _hook_cost_ms(job, args.nproc)
    print(f"{args.nproc} procs, {args.iters} iterations, first {args.warmup} dropped, best of {args.rounds} rounds")
    print(f"watchdog+stragglers on : {on:.2f} ms   (rounds: {', '.join(f'{x:.2f}' for x in results['on'])})")
    print(f"watchdog+stragglers off: {off:.2f} ms   (rounds: {', '.join(f'{x:.2f}' for x in results['off'])})")
    print(f"ratio on/off: {on / off:.4f}x (goal <= 1.01x; end-to-end, noisy on a shared machine)")
    print(f"hook work per iteration: {hook_ms * 1e3:.2f} us = {hook_ms / off:.5f} of the {off:.1f} ms step "
          f"(ratio {1 + hook_ms / off:.5f}x)")
    return 0


def _hook_cost_ms(job, world: int, iters: int = 20000) -> float:
    """Mean ms per iteration of the resilience hooks alone: beat + payload (+ gather/summary every 10) + wrapper."""
    from mtk.training.stragglers import StragglerStats
    from mtk.training.watchdog import Heartbeat

    with tempfile.TemporaryDirectory() as tmp:
        spec = job.resilience.model_copy(deep=True)
        spec.stragglers.interval = 10
        beat = Heartbeat(tmp, 0, spec.watchdog)  # not started: no thread, only the in-memory beat
        stats = StragglerStats(spec.stragglers, tmp, 0, world)
        fwd = stats.wrap(lambda: None)
        micro = job.train.global_batch_size // job.train.micro_batch_size
        t0 = time.perf_counter()
        for i in range(1, iters + 1):
            beat.beat("step", i)
            for _ in range(micro):
                fwd()
            extra = stats.payload(i, 0.1)
            if extra:
                stats.receive(i, extra)
        return (time.perf_counter() - t0) / iters * 1e3


if __name__ == "__main__":
    sys.exit(main())
