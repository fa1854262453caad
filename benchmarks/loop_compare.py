"""mtk's training loop vs Megatron-LM's ``pretrain_gpt.py`` on CPU/gloo: same model, layout, batch and settings.

    python benchmarks/loop_compare.py [--models gpt,llama] [--layouts tp2,dp2] [--rounds 2] [--iters 20]
        [--warmup 5] [--megatron-lm TREE] [--work-dir DIR] [--audit-off] [--profile] [--dry-run]

Models (both on top of ``examples/tiny.yaml``; sizes small enough that the loop's own per-step work — Python
per micro-batch, host syncs, collectives, logging — is what is timed):

* ``gpt``: the ``tiny`` preset (2 layers, hidden 64, 4 heads, seq 64, vocab 1024; learned positions,
  LayerNorm, GELU, tied embeddings, biases)
* ``llama``: Llama-shaped at the same size: RoPE, RMSNorm, SwiGLU (FFN 176), GQA (4 heads, 2 groups),
  untied embeddings, no biases

Layouts, 2 ranks each: ``tp2`` (tensor parallel 2) and ``dp2`` (data parallel 2). Both sides: fp32, mock data,
micro batch 2, global batch 8, Adam with clip 1.0, cosine LR with warm-up, ``--num-workers`` data loader
workers per rank, no checkpointing, no evaluation, logging every iteration.

mtk runs as a user runs it: ``mtk launch examples/tiny.yaml --backend local --set ...``. Megatron-LM runs its own
``pretrain_gpt.py`` (tree ``core_r0.19.0``, extracted from ``--megatron-lm``, by default the bare mirror) on this
CPU through the tests' runner and CPU shim (``tests/support/megatron_lm_run.py``,
``tests/support/megatron_lm_cpu/sitecustomize.py``): the flags a user writes for the same job, the CPU kernel
choices, and ``--no-create-attention-mask-in-dataloader`` (mtk's data has no mask tensor either; both use
the causal mask the attention builds). Before timing, a separate process builds, for each model × layout,
the TransformerConfig, DDP config, OptimizerConfig and LR scheduler mtk's engine builds and those Megatron-LM
builds from that argv (``core_transformer_config_from_args``, ``get_megatron_ddp_config``,
``get_megatron_optimizer_config``, ``get_optimizer_param_scheduler``) and prints every field that differs,
with the reason where it cannot change a training step; any other difference fails the command.

Step time: the wall-clock between consecutive iteration ends after ``--warmup`` iterations, median per run
(mtk: ``time`` of consecutive ``metrics.jsonl`` records; Megatron-LM: "elapsed time per iteration (ms)" at
``--log-interval 1``); rounds interleave mtk, Megatron-LM, mtk, ... so background load hits both alike; the
figure is the median over rounds. Printed per model × layout: both and mtk/Megatron-LM (goal ≤ 1.00×).

On CPU mtk's compat layer audits device placement (``mtk.training.strict_device``: every torch call's result
is marked host/device so a bug that would crash a GPU run fails here); Megatron-LM's CPU shim turns that audit
off. ``--audit-off`` adds a third interleaved side, mtk with the audit never installed, so its cost is printed.
``--profile`` then runs each side once more per model × layout with cProfile on rank 0 and prints ms per
iteration in the phases both loops share. Both go through this script as a wrapper torchrun starts in place of
the program (``--wrapped``); nothing in mtk or Megatron-LM reads an option for it. ``--dry-run`` prints both
commands and runs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from gpu_megatron_compare import megatron_step_ms, mtk_step_ms  # noqa: E402
from support import megatron_lm_run as mlm  # noqa: E402

BASE = REPO / "examples" / "tiny.yaml"
MODELS: dict[str, list[str]] = {
    "gpt": ["model.preset=tiny"],
    "llama": ["model.preset=null", "model.arch=llama", "model.num_layers=2", "model.hidden_size=64",
              "model.ffn_hidden_size=176", "model.num_attention_heads=4", "model.num_query_groups=2",
              "model.seq_length=64", "model.max_position_embeddings=64", "model.vocab_size=1024",
              "model.position_embedding=rope", "model.normalization=RMSNorm", "model.activation=swiglu",
              "model.untie_embeddings=true", "model.add_bias_linear=false", "model.hidden_dropout=0.0",
              "model.attention_dropout=0.0"],
}
LAYOUTS: dict[str, list[str]] = {"tp2": ["parallel.tp=2"], "dp2": ["parallel.tp=1"]}
NPROC = 2

# Fields that differ by construction and cannot change a training step; each says why.
EXPLAINED = {
    "transformer.inference_sampling_seed": "inference only (Megatron-LM copies --seed into it)",
    "transformer.transformer_impl": "only 'inference_optimized' changes what megatron-core builds; both build "
                                    "the local layer spec here (mtk's plan: no Transformer Engine on CPU)",
    "transformer.add_qkv_bias": "the QKV projection has a bias when add_bias_linear or add_qkv_bias; "
                                "add_bias_linear is the same on both sides (Megatron-LM copies it here)",
    "transformer.cp_comm_type": "context parallelism only (cp=1)",
    "transformer.tensor_parallel_num_weight_shards": "None is megatron-core's tp x gtp_weight_remat_size, the "
                                                     "value Megatron-LM writes",
    "transformer.expert_tensor_parallel_num_weight_shards": "MoE only; None is the same default as above",
    "ddp.data_parallel_sharding_strategy": "Megatron FSDP only (not used by either)",
    "optimizer.barrier_with_L1_time": "barriers of level-1 timers; Megatron-LM's --timing-log-level 0 makes them "
                                      "dummy timers (no barrier); mtk hands the optimizer no timers",
    "optimizer.fp8_recipe": "fp8 only (fp32 here)",
    "optimizer.initial_loss_scale": "fp16 only (fp32 here)",
    "optimizer.muon_momentum": "Muon optimizer only (Adam here)",
    "optimizer.optimizer_offload_fraction": "used only with optimizer_cpu_offload, off on both sides",
    "scheduler.lr_wsd_decay_style": "WSD schedule only (cosine here)",
    "scheduler.use_checkpoint_opt_param_scheduler": "resume only: how a checkpoint's schedule is read",
    "scheduler.override_opt_param_scheduler": "resume only: mtk's spec schedule wins over a checkpoint's",
}


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    layout: str
    iters: int
    num_workers: int
    work: Path

    @property
    def name(self) -> str:
        return f"{self.model}-{self.layout}"

    def overrides(self) -> list[str]:
        """``--set`` values on top of examples/tiny.yaml."""
        return [*MODELS[self.model], *LAYOUTS[self.layout], f"cluster.procs_per_node={NPROC}",
                "name=loop-" + self.name, "train.precision=fp32", "train.micro_batch_size=2",
                "train.global_batch_size=8", f"train.iterations={self.iters}", "train.log_interval=1",
                "train.eval_interval=null", "train.tensorboard=false", "train.checkpoint.save_interval=null",
                "train.checkpoint.save_on_exit=false", "train.checkpoint.load=false", "debug.env_dump=false",
                f"data.num_workers={self.num_workers}", f"data.dir={self.work / 'data'}"]


def load_case_job(case: Case):
    from mtk.spec import load_job

    return load_job(BASE, case.overrides())


def mtk_command(case: Case, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "mtk", "launch", str(BASE), "--backend", "local", "--run-dir", str(run_dir)]
    for item in case.overrides():
        cmd += ["--set", item]
    return cmd


def megatron_argv(case: Case, job) -> list[str]:
    """pretrain_gpt.py's flags for the job (the tests' mapping + CPU kernel choices), without checkpointing."""
    argv = mlm.pretrain_gpt_argv(job, load=None, save=case.work / "unused", save_interval=1)
    for flag in ("--save", "--save-interval"):
        i = argv.index(flag)
        del argv[i:i + 2]
    argv += ["--num-workers", str(job.data.num_workers), "--no-create-attention-mask-in-dataloader"]
    # mtk's engine choices that are not Megatron-LM's defaults, as flags (the settings diff checks the rest)
    from mtk.training.device_plan import plan

    if plan(job, gpu=False, te=False).grad_reduce_in_fp32:
        argv.append("--accumulate-allreduce-grads-in-fp32")
    if job.train.manual_gc:  # NVIDIA's H100 recipe, mtk's default: GC at start only (+ every N iterations)
        argv += ["--manual-gc", "--manual-gc-interval", str(job.train.manual_gc_interval)]
    return argv


# --------------------------------------------------------------------------- settings diff (own process)


def _plain(value):
    """A comparable form of a config value: functions by qualified name, partials by their parts."""
    import functools

    if isinstance(value, functools.partial):
        return [_plain(value.func), [_plain(a) for a in value.args],
                {k: _plain(v) for k, v in sorted(value.keywords.items())}]
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return repr(value)


def _fields(obj) -> dict:
    return {f.name: _plain(getattr(obj, f.name, None)) for f in dataclasses.fields(obj)}


def _scheduler_fields(sched) -> dict:
    return {k: _plain(v) for k, v in vars(sched).items() if k not in ("optimizer", "num_steps")}


class _NoOptimizer:
    """Enough of an optimizer for OptimizerParamScheduler's constructor (it sets lr/wd on each group)."""

    param_groups: list = [{}]


def settings_diff(job, argv: list[str], world: int) -> dict[str, list]:
    """Every config field whose value differs between mtk's engine and Megatron-LM for this argv."""
    from megatron.training import arguments, global_vars, training
    from megatron.training.argument_utils import core_transformer_config_from_args
    from mtk.training import device_plan, model, optim

    os.environ["WORLD_SIZE"] = str(world)
    sys.argv = ["pretrain_gpt.py", *argv]
    args = arguments.validate_args(arguments.parse_args(), {})
    global_vars._GLOBAL_ARGS = args
    dp = world // (job.parallel.tp * job.parallel.pp * job.parallel.cp)
    plan = device_plan.plan_for_here(job, gpu=False, dp_size=dp)
    ours_opt = optim.optimizer_config(job, plan)  # as optim.build_optimizer builds it
    pairs = {
        "transformer": (_fields(model.transformer_config(job, plan)),
                        _fields(core_transformer_config_from_args(args))),
        "ddp": (_fields(optim.ddp_config(job, plan)), _fields(training.get_megatron_ddp_config(args))),
        "optimizer": (_fields(ours_opt), _fields(training.get_megatron_optimizer_config(args)[0])),
        "scheduler": (_scheduler_fields(optim.build_scheduler(job, _NoOptimizer())),
                      _scheduler_fields(training.get_optimizer_param_scheduler(_NoOptimizer()))),
        "loop": ({"micro_batch_size": job.train.micro_batch_size, "global_batch_size": job.train.global_batch_size,
                  "train_iters": job.train.iterations, "num_workers": job.data.num_workers, "seed": job.train.seed,
                  "manual_gc": job.train.manual_gc, "check_for_nan_in_loss_and_grad": plan.check_for_nan_in_grad,
                  "create_attention_mask_in_dataloader": False},
                 {k: getattr(args, k) for k in ("micro_batch_size", "global_batch_size", "train_iters",
                                                "num_workers", "seed", "manual_gc",
                                                "check_for_nan_in_loss_and_grad",
                                                "create_attention_mask_in_dataloader")}),
    }
    out = {}
    for section, (ours, theirs) in pairs.items():
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key, "<absent>") != theirs.get(key, "<absent>"):
                out[f"{section}.{key}"] = [ours.get(key, "<absent>"), theirs.get(key, "<absent>")]
    return out


def _settings_diff_main(cases_file: str, out_file: str) -> None:
    import typing

    if not hasattr(typing, "override"):  # megatron.training uses Python 3.12's typing.override
        typing.override = lambda f: f  # type: ignore[attr-defined]
    from mtk.training import compat

    compat.install()
    from megatron.training import arguments

    from mtk.spec import load_job_json

    arguments.get_device_arch_version = lambda: 10  # validate_args asks the GPU's architecture when TP > 1
    result = {}
    for name, job_file, argv in json.loads(Path(cases_file).read_text()):
        result[name] = settings_diff(load_job_json(job_file), argv, NPROC)
    Path(out_file).write_text(json.dumps(result, indent=1))


def check_settings(cases: list[tuple[Case, object, list[str]]], work: Path) -> bool:
    """Print every differing field per case; False if any is not in EXPLAINED."""
    spec = []
    for case, job, argv in cases:
        job_file = work / f"{case.name}.job.json"
        job_file.write_text(job.to_json())
        spec.append([case.name, str(job_file), argv])
    (work / "settings_cases.json").write_text(json.dumps(spec))
    out = work / "settings_diff.json"
    proc = subprocess.run([sys.executable, __file__, "--settings-diff", str(work / "settings_cases.json"), str(out)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit("settings diff failed:\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-30:]))
    ok = True
    for name, diffs in json.loads(out.read_text()).items():
        unexplained = {k: v for k, v in diffs.items() if k not in EXPLAINED}
        print(f"settings {name}: {len(diffs)} field(s) differ, {len(unexplained)} unexplained")
        for key, (ours, theirs) in diffs.items():
            why = EXPLAINED.get(key, "UNEXPLAINED")
            print(f"  {key}: mtk {ours!r} | Megatron-LM {theirs!r}  ({why})")
        ok = ok and not unexplained
    return ok


# --------------------------------------------------------------------------- runs


def _wrapper(profile: Path | None, strict: bool) -> tuple[str, ...]:
    """The script torchrun starts in place of the program (nothing when neither option is asked for)."""
    if profile is None and strict:
        return ()
    return (__file__, "--wrapped", str(profile or "-"), "strict" if strict else "no-strict", "--")


def run_mtk(case: Case, round_: int | str, profile: Path | None = None, strict: bool = True) -> float:
    run_dir = case.work / f"mtk-{case.name}-{round_}"
    log = case.work / f"mtk-{case.name}-{round_}.log"
    wrapper = _wrapper(profile, strict)
    if not wrapper:
        cmd = mtk_command(case, run_dir)
    else:  # the worker under torchrun directly, through the wrapper (mtk launch cannot wrap it)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "job.json").write_text(load_case_job(case).to_json())
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={NPROC}",
               *wrapper, "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=case.work,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
    if rc != 0 or not (run_dir / "metrics.jsonl").exists():
        raise SystemExit(f"mtk {case.name} round {round_} failed (rc={rc}); see {log}")
    return mtk_step_ms(run_dir, WARMUP[0])


def run_megatron(case: Case, tree: Path, argv: list[str], round_: int | str, profile: Path | None = None) -> float:
    workdir = case.work / f"megatron-{case.name}-{round_}"
    rc, _records = mlm.run_pretrain_gpt(tree, argv, workdir, nproc=NPROC, timeout=1800,
                                        wrapper=_wrapper(profile, strict=True))
    log = (workdir / "pretrain_gpt.log").read_text(errors="replace")
    if rc != 0:
        raise SystemExit(f"Megatron-LM {case.name} round {round_} failed (rc={rc}); see {workdir}/pretrain_gpt.log")
    return megatron_step_ms(log, WARMUP[0])


WARMUP = [5]  # set from --warmup


def _wrapped(profile: str, strict: str, target: list[str]) -> None:
    """Run ``target`` (``-m module args`` or ``script args``) in this process: rank 0 under cProfile when
    ``profile`` is a path; with ``no-strict`` mtk's CPU strict-device audit is never installed (the
    audit's cost; Megatron-LM's shim turns it off too)."""
    import cProfile
    import runpy

    if strict == "no-strict":
        from mtk.training import strict_device

        strict_device.install = lambda: None  # compat.install() calls it through the module
    prof = cProfile.Profile() if profile != "-" and os.environ.get("RANK") == "0" else None
    sys.argv = target[1:] if target[0] == "-m" else target
    if target[0] != "-m":
        sys.path.insert(0, str(Path(target[0]).parent))
    if prof:
        prof.enable()
    try:
        if target[0] == "-m":
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        if prof:
            prof.disable()
            prof.dump_stats(profile)


# Per-iteration phases both loops share: (label, mtk function, Megatron-LM function), as file:function.
PHASES = [
    ("whole iteration", "loop.py:run", "training.py:train"),
    ("train step (fwd/bwd + optimizer)", "loop.py:train_step", "training.py:train_step"),
    ("forward-backward schedule", "schedules.py:forward_backward_no_pipelining",
     "schedules.py:forward_backward_no_pipelining"),
    ("forward_step (batch + model)", "loop.py:forward_step", "pretrain_gpt.py:forward_step"),
    ("  batch: data loader next()", "dataloader.py:__next__", "dataloader.py:__next__"),
    ("  batch: to device (+ TP broadcast)", "data.py:to_device", "pretrain_gpt.py:get_batch"),
    ("model forward (GPTModel)", "gpt_model.py:forward", "gpt_model.py:forward"),
    ("backward", "schedules.py:backward_step", "schedules.py:backward_step"),
    ("optimizer step", "optimizer.py:step", "optimizer.py:step"),
    ("finalize grads (DP/TP reduce)", "finalize_model_grads.py:finalize_model_grads",
     "finalize_model_grads.py:finalize_model_grads"),
    ("logging", "metrics.py:log", "training.py:training_log"),
    ("torch calls via the CPU device mode", "compat.py:__torch_function__", "compat.py:__torch_function__"),
    ("  of which: strict-device audit", "strict_device.py:record", "strict_device.py:record"),
]


def _cum(stats, key: str) -> tuple[float, int]:
    """(cumulative seconds, primitive calls) of the functions ``file:name`` in a pstats table."""
    file, name = key.split(":")
    total, calls = 0.0, 0
    for (path, _line, func), (cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if func == name and Path(path).name == file:
            total += ct
            calls += cc
    return total, calls


def print_profile(case: Case, mtk_prof: Path, mlm_prof: Path) -> None:
    import pstats

    ours, theirs = pstats.Stats(str(mtk_prof)), pstats.Stats(str(mlm_prof))
    iters = case.iters
    print(f"profile {case.name} (cProfile on rank 0, all {iters} iterations, ms per iteration):")
    print(f"  {'phase':36s} {'mtk':>9s} {'Megatron-LM':>12s}")
    for label, a, b in PHASES:
        (ta, _), (tb, _) = _cum(ours, a), _cum(theirs, b)
        print(f"  {label:36s} {ta / iters * 1e3:9.1f} {tb / iters * 1e3:12.1f}")
    for name, st in (("mtk", ours), ("Megatron-LM", theirs)):
        print(f"  {name}: top functions by own time (s, whole process)")
        st.sort_stats("tottime")
        for (path, line, func), (_cc, nc, tt, _ct, _c) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:12]:
            print(f"    {tt:7.2f}s {nc:8d} calls  {Path(path).name}:{line} {func}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--wrapped"]:
        _wrapped(raw[1], raw[2], raw[4:])
        return 0
    if raw[:1] == ["--settings-diff"]:
        _settings_diff_main(raw[1], raw[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt,llama", help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--layouts", default="tp2,dp2", help=f"comma list of {', '.join(LAYOUTS)}")
    ap.add_argument("--rounds", type=int, default=2, help="runs per side, interleaved (median reported); 0: none")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="iterations dropped from each run")
    ap.add_argument("--num-workers", type=int, default=2, help="data loader workers per rank (both sides)")
    ap.add_argument("--megatron-lm", type=Path, default=mlm.MIRROR,
                    help=f"Megatron-LM checkout or bare git dir (default: {mlm.MIRROR}, tree {mlm.REF})")
    ap.add_argument("--work-dir", type=Path, help="default: a new temporary directory")
    ap.add_argument("--audit-off", action="store_true",
                    help="also time mtk with its CPU strict-device audit off (a third interleaved side): its cost")
    ap.add_argument("--profile", action="store_true", help="also one cProfile'd run per side (rank 0)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--dry-run", action="store_true", help="print both commands; run nothing")
    args = ap.parse_args(raw)
    models, layouts = args.models.split(","), args.layouts.split(",")
    for value, known, flag in ((models, MODELS, "--models"), (layouts, LAYOUTS, "--layouts")):
        bad = [v for v in value if v not in known]
        if bad:
            ap.error(f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(known)}")
    if args.iters < args.warmup + 3:
        ap.error(f"--iters ({args.iters}) must exceed --warmup ({args.warmup}) by at least 3")
    WARMUP[0] = args.warmup
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="mtk-loop-compare-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cases = []
    for model in models:
        for layout in layouts:
            case = Case(model, layout, args.iters, args.num_workers, work)
            job = load_case_job(case)
            cases.append((case, job, megatron_argv(case, job)))
    print(f"{NPROC} ranks, CPU/gloo, fp32; {args.iters} iterations per run, first {args.warmup} dropped; "
          f"{args.rounds} interleaved round(s); work dir {work}")
    for case, _job, margv in cases:
        print(f"== {case.name}")
        print("mtk:         " + shlex.join(mtk_command(case, work / f"mtk-{case.name}-0")))
        print("Megatron-LM: " + shlex.join([f"PYTHONPATH={mlm.SHIM}", "TORCHDYNAMO_DISABLE=1", "OMP_NUM_THREADS=1",
                                            "torchrun", f"--nproc-per-node={NPROC}", "pretrain_gpt.py", *margv]))
    if args.dry_run:
        return 0
    tree = args.megatron_lm
    if not (tree / "pretrain_gpt.py").is_file():
        tree = mlm.extract_tree(work / "megatron-lm", mirror=tree)
    print(f"Megatron-LM tree: {tree} (commit {mlm.tree_commit(tree)[:12]})", flush=True)
    settings_ok = check_settings(cases, work)
    sys.stdout.flush()
    results = []
    for case, _job, margv in (cases if args.rounds > 0 else []):
        ours, theirs, loose = [], [], []
        for r in range(args.rounds):
            ours.append(run_mtk(case, r))
            theirs.append(run_megatron(case, tree, margv, r))
            line = f"  {case.name} round {r}: mtk {ours[-1]:.1f} ms, Megatron-LM {theirs[-1]:.1f} ms"
            if args.audit_off:
                loose.append(run_mtk(case, f"{r}-audit-off", strict=False))
                line += f", mtk without the strict-device audit {loose[-1]:.1f} ms"
            print(line, flush=True)
        a, b = statistics.median(ours), statistics.median(theirs)
        res = {"case": case.name, "mtk_ms": a, "megatron_lm_ms": b, "ratio": a / b,
               "mtk_rounds": ours, "megatron_lm_rounds": theirs}
        if loose:
            res |= {"mtk_audit_off_ms": statistics.median(loose), "mtk_audit_off_rounds": loose,
                    "audit_off_ratio": statistics.median(loose) / b}
        results.append(res)
    if results:
        print_results(cases, results)
    if args.profile:
        for case, _job, margv in cases:
            mp, lp = work / f"mtk-{case.name}.prof", work / f"megatron-{case.name}.prof"
            run_mtk(case, 99, profile=mp)
            run_megatron(case, tree, margv, 99, profile=lp)
            print_profile(case, mp, lp)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if not settings_ok:
        print("FAILED: settings differ beyond the explained fields (see above)")
        return 1
    return 0


def print_results(cases: list, results: list[dict]) -> None:
    print(f"\n{'model':6s} {'layout':6s} {'mtk ms/it':>10s} {'MLM ms/it':>10s} {'mtk/MLM':>8s}   rounds (mtk | MLM)")
    for case_t, res in zip(cases, results, strict=True):
        case = case_t[0]
        rounds = (", ".join(f"{x:.1f}" for x in res["mtk_rounds"]) + " | "
                  + ", ".join(f"{x:.1f}" for x in res["megatron_lm_rounds"]))
        print(f"{case.model:6s} {case.layout:6s} {res['mtk_ms']:10.1f} {res['megatron_lm_ms']:10.1f} "
              f"{res['ratio']:7.3f}x   {rounds}")
        if "mtk_audit_off_ms" in res:
            print(f"{'':13s} mtk, strict-device audit off: {res['mtk_audit_off_ms']:.1f} ms/it, "
                  f"{res['audit_off_ratio']:.3f}x of Megatron-LM; the audit costs "
                  f"{res['mtk_ms'] - res['mtk_audit_off_ms']:+.1f} ms/it "
                  f"(rounds: {', '.join(f'{x:.1f}' for x in res['mtk_audit_off_rounds'])})")
    print("goal: mtk/Megatron-LM <= 1.00x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
