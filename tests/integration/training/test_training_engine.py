"""The engine end to end on CPU: torchrun, 2 ranks, gloo, the tiny model.

Runs are shared through session fixtures (each costs ~20–30 s of imports and setup):

* ``tp_ref``   TP=2 fp32 plain Adam, 20 iterations, saves at 10/20, eval, torch profiler, TensorBoard
* ``tp_sigterm`` same job, SIGTERM mid-run (→ 42), restarted to the end
* ``dp_ref`` / ``dp_usr2``  DP=2 bf16 distributed optimizer on an IndexedDatasetBuilder blend; SIGUSR2
* ``sp_ref`` / ``sp_crash`` TP=2 bf16 plain + sequence parallel; async saves, crash while saving, restart
  + save trigger, keep_last
* ``dist_fp32_ref`` / ``dist_fp32_exit``  DP=2 fp32 distributed optimizer + full recompute; exit trigger
* ``pp_from_tp``  PP=2 resuming from tp_ref's TP=2 checkpoint; ``moe``  4 experts top-2 at EP=2
"""

from __future__ import annotations

import json
import signal
import statistics

import pytest
from support.faults import Hold, crash_env

from mtk import exitcodes, run_layout

pytestmark = pytest.mark.integration

TP_JOB = ("parallel.tp=2", "train.precision=fp32", "train.iterations=20", "train.lr_warmup_iters=2")
DP_JOB = ("parallel.tp=1", "parallel.distributed_optimizer=true", "train.precision=bf16",
          "train.iterations=20", "train.lr_warmup_iters=2", "train.lr=0.003", "train.min_lr=0.0003")
SP_JOB = ("parallel.tp=2", "parallel.sequence_parallel=true", "train.precision=bf16",
          "train.iterations=12", "train.lr_warmup_iters=2")
DIST_FP32_JOB = ("parallel.tp=1", "parallel.distributed_optimizer=true", "train.precision=fp32",
                 "train.recompute=full", "train.iterations=12", "train.lr_warmup_iters=2")


def _blend(corpus) -> tuple[str, ...]:
    return (f"data.blend=[{{prefix: {corpus[0]}, weight: 0.7}}, {{prefix: {corpus[1]}, weight: 0.3}}]",
            "data.split='98,2,0'")


def _falling(losses: list[float]) -> bool:
    k = max(3, len(losses) // 4)
    return statistics.mean(losses[-k:]) < statistics.mean(losses[:k]) - 0.05


def _interrupt_and_resume(tr, run_dir, sig_or_trigger, at: int) -> dict:
    """Start; while both ranks wait after iteration ``at``, interrupt (signal to the workers or a trigger file),
    then let them go on (the interruption is acted on at iteration ``at + 1``); restart."""
    hold = Hold(run_dir.parent / f"{run_dir.name}-hold", after=[at])
    proc = tr.start(run_dir, env=hold.env(), tag="first")
    tr.wait_until(proc, f"both ranks to wait after iteration {at}", lambda: hold.held(at, ranks=2))
    if isinstance(sig_or_trigger, str):
        trigger = run_dir / sig_or_trigger
        trigger.parent.mkdir(parents=True, exist_ok=True)
        trigger.touch()
    else:
        assert tr.signal_workers(proc, sig_or_trigger) == 2
        tr.wait_until(proc, "the workers to catch the signal", lambda: hold.signalled(at))
    hold.release(at)
    rc1 = tr.finish(proc)
    first = {"rc": rc1, "last_exit": tr.last_exit(run_dir), "log": (run_dir / "first.log").read_text(),
             "records": tr.by_iteration(run_dir)}
    rc2 = tr.run(run_dir, tag="second")
    return {"first": first, "rc2": rc2, "log2": (run_dir / "second.log").read_text(),
            "last_exit2": tr.last_exit(run_dir)}


# --------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="session")
def tp_ref(tr, engine_root):
    d = engine_root / "tp_ref"
    tr.make_job(d, *TP_JOB, "train.checkpoint.save_interval=10", "train.eval_interval=10", "train.eval_iters=1",
                "train.tensorboard=true", "debug.torch_profiler.enabled=true", "debug.torch_profiler.start=2",
                "debug.torch_profiler.stop=4", "debug.env_dump=true")
    rc = tr.run(d)
    assert rc == 0, (d / "run.log").read_text()[-4000:]
    return d


@pytest.fixture(scope="session")
def tp_sigterm(tr, engine_root):
    d = engine_root / "tp_sigterm"
    tr.make_job(d, *TP_JOB)
    return d, _interrupt_and_resume(tr, d, signal.SIGTERM, at=4)


@pytest.fixture(scope="session")
def dp_ref(tr, engine_root, indexed_corpus):
    d = engine_root / "dp_ref"
    tr.make_job(d, *DP_JOB, *_blend(indexed_corpus), "train.checkpoint.save_interval=10")
    assert tr.run(d) == 0, (d / "run.log").read_text()[-4000:]
    return d


@pytest.fixture(scope="session")
def dp_usr2(tr, engine_root, indexed_corpus, dp_ref):
    d = engine_root / "dp_usr2"
    tr.make_job(d, *DP_JOB, *_blend(indexed_corpus))
    return d, _interrupt_and_resume(tr, d, signal.SIGUSR2, at=5)


@pytest.fixture(scope="session")
def sp_ref(tr, engine_root):
    d = engine_root / "sp_ref"
    tr.make_job(d, *SP_JOB)
    assert tr.run(d) == 0, (d / "run.log").read_text()[-4000:]
    return d


@pytest.fixture(scope="session")
def sp_crash(tr, engine_root):
    """Async saves every 4, keep the last 3; rank 0 is SIGKILLed after iteration 8's shards are written,
    before they are published. The restart starts with a save trigger present."""
    d = engine_root / "sp_crash"
    tr.make_job(d, *SP_JOB, "train.checkpoint.save_interval=4", "train.checkpoint.keep_last=3",
                "train.checkpoint.async_save=true")
    rc1 = tr.run(d, env=crash_env("save:8"), tag="first")
    ckpt = d / "checkpoints"
    after_crash = {"rc": rc1, "tracker": tr.tracker(ckpt), "entries": sorted(p.name for p in ckpt.iterdir())}
    (d / "triggers").mkdir(exist_ok=True)
    (d / "triggers" / "save").touch()
    rc2 = tr.run(d, tag="second")
    return d, after_crash, rc2


@pytest.fixture(scope="session")
def dist_fp32_ref(tr, engine_root):
    d = engine_root / "dist_fp32_ref"
    tr.make_job(d, *DIST_FP32_JOB)
    assert tr.run(d) == 0, (d / "run.log").read_text()[-4000:]
    return d


@pytest.fixture(scope="session")
def dist_fp32_exit(tr, engine_root):
    d = engine_root / "dist_fp32_exit"
    tr.make_job(d, *DIST_FP32_JOB)
    return d, _interrupt_and_resume(tr, d, run_layout.EXIT_TRIGGER, at=3)


# --------------------------------------------------------------------------- training at each parallelism


def _losses(run_dir, first=1, last=None) -> list[float]:
    recs = sorted(_by_iter(run_dir).items())
    return [r["lm_loss"] for i, r in recs if i >= first and (last is None or i <= last)]


def _by_iter(run_dir) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "train":
            out[r["iteration"]] = r
    return out


def test_tp2_trains_20_iterations_with_falling_loss(tp_ref):
    recs = _by_iter(tp_ref)
    assert sorted(recs) == list(range(1, 21))
    assert _falling(_losses(tp_ref))
    assert all(r["skipped"] == 0 and r["nan"] == 0 for r in recs.values())


def test_tp2_grad_norms_match_world_size_1(tr, engine_root, tp_ref):
    d = engine_root / "world1"
    tr.make_job(d, *TP_JOB, "parallel.tp=1", "cluster.procs_per_node=1", "train.iterations=3")
    assert tr.run(d, nproc=1) == 0, (d / "run.log").read_text()[-4000:]
    one, two = _by_iter(d), _by_iter(tp_ref)
    for i in (1, 2, 3):
        assert abs(one[i]["grad_norm"] - two[i]["grad_norm"]) < 1e-5, (i, one[i], two[i])
        assert abs(one[i]["lm_loss"] - two[i]["lm_loss"]) < 1e-5


def test_dp2_bf16_distributed_optimizer_trains_on_indexed_blend(dp_ref):
    recs = _by_iter(dp_ref)
    assert sorted(recs) == list(range(1, 21))
    assert _falling(_losses(dp_ref))
    log = (dp_ref / "run.log").read_text()
    assert "dp=2" in log and "bf16" in log


def test_pp2_loads_tp2_checkpoint_and_trains_20_iterations(tr, engine_root, tp_ref):
    """Topology change TP=2 → PP=2: the plain optimizer's state follows the model's sharding."""
    d = engine_root / "pp_from_tp"
    tr.make_job(d, "parallel.tp=1", "parallel.pp=2", "train.precision=fp32", "train.iterations=30",
                "train.lr_warmup_iters=2")
    tr.copy_checkpoint(tp_ref / "checkpoints", 10, d)
    assert tr.run(d) == 0, (d / "run.log").read_text()[-4000:]
    log = (d / "run.log").read_text()
    assert "resumed from" in log and "at iteration 10" in log and "pp=2" in log
    recs = _by_iter(d)
    assert sorted(recs) == list(range(11, 31))
    # Same weights, same data position: the first PP=2 step sees the TP=2 run's iteration-11 loss.
    assert abs(recs[11]["lm_loss"] - _by_iter(tp_ref)[11]["lm_loss"]) < 1e-4
    assert _falling(_losses(d))


def test_tiny_moe_trains_at_ep2_with_selective_recompute(tr, engine_root):
    d = engine_root / "moe"
    tr.make_job(d, "parallel.tp=1", "parallel.ep=2", "model.moe.num_experts=4", "model.moe.router_topk=2",
                "train.precision=fp32", "train.iterations=16", "train.lr_warmup_iters=2",
                "train.recompute=selective")
    assert tr.run(d) == 0, (d / "run.log").read_text()[-4000:]
    recs = _by_iter(d)
    assert _falling(_losses(d))
    assert all(r["moe_aux_loss"] > 0 for r in recs.values())
    assert "ep=2" in (d / "run.log").read_text()


# --------------------------------------------------------------------------- exact resume


def _assert_resume_exact(ref_dir, run_dir, k: int) -> None:
    ref, got = _by_iter(ref_dir), _by_iter(run_dir)
    n = max(ref)
    assert sorted(i for i in got if i > k) == list(range(k + 1, n + 1))
    for i in range(k + 1, n + 1):
        assert got[i]["lm_loss"] == ref[i]["lm_loss"], (i, got[i]["lm_loss"], ref[i]["lm_loss"])
        assert got[i]["grad_norm"] == ref[i]["grad_norm"], i


def test_sigterm_saves_exits_42_and_resume_is_exact_plain_fp32(tp_ref, tp_sigterm):
    d, res = tp_sigterm
    first = res["first"]
    assert first["rc"] != 0  # torchrun reports any non-zero worker exit as a failure...
    assert "exitcode  : 42" in first["log"]  # ...but the workers exited with REQUEUE
    le = first["last_exit"]
    assert le["code"] == exitcodes.REQUEUE and le["reason"].startswith("signal SIGTERM")
    k = le["iteration"]
    assert le["checkpoint_iteration"] == k == 5  # held after 4: the signal is acted on at the next iteration
    assert max(first["records"]) == k  # the iteration in flight finished, nothing after it ran
    assert res["rc2"] == 0 and f"at iteration {k}," in res["log2"]
    assert res["last_exit2"] == res["last_exit2"] | {"code": 0, "iteration": 20, "reason": "completed"}
    _assert_resume_exact(tp_ref, d, k)


def test_sigusr2_saves_exits_42_and_resume_is_exact_distributed_bf16(dp_ref, dp_usr2):
    d, res = dp_usr2
    le = res["first"]["last_exit"]
    assert le["code"] == exitcodes.REQUEUE and le["reason"].startswith("signal SIGUSR2")
    assert "exitcode  : 42" in res["first"]["log"]
    k = le["iteration"]
    assert le["checkpoint_iteration"] == k == 6
    assert res["rc2"] == 0
    _assert_resume_exact(dp_ref, d, k)


def test_crash_during_save_keeps_tracker_and_resume_is_exact_plain_bf16(sp_ref, sp_crash):
    d, after, rc2 = sp_crash
    assert after["rc"] != 0
    log1 = (d / "first.log").read_text()
    assert "scheduled async save of iteration 4" in log1 and "published iteration 4 (async" in log1
    assert after["tracker"] == 4  # the crash at 8 never moved the tracker
    assert "iter_0000008.partial" in after["entries"] and "iter_0000004" in after["entries"]
    log2 = (d / "second.log").read_text()
    assert "removed partial save" in log2 and "iter_0000008.partial" in log2
    assert "resumed from" in log2 and "at iteration 4," in log2
    assert rc2 == 0
    _assert_resume_exact(sp_ref, d, 4)


def test_save_trigger_saves_without_stopping(sp_crash):
    d, _after, rc2 = sp_crash
    log2 = (d / "second.log").read_text()
    assert "save trigger found: saving at iteration 5" in log2
    # saves: 4 (before the crash), 5 (trigger), 8, 12 (interval); keep_last=3 pruned 4
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == [
        "iter_0000005", "iter_0000008", "iter_0000012", "latest_checkpointed_iteration.txt"]
    assert not (d / "triggers" / "save").exists()
    assert rc2 == 0 and max(_by_iter(d)) == 12  # it kept going


def test_exit_trigger_saves_exits_43_and_resume_is_exact_distributed_fp32(dist_fp32_ref, dist_fp32_exit):
    d, res = dist_fp32_exit
    first = res["first"]
    le = first["last_exit"]
    assert le["code"] == exitcodes.STOPPED and le["reason"] == "exit trigger"
    assert "exitcode  : 43" in first["log"]
    k = le["iteration"]
    assert le["checkpoint_iteration"] == k == 4
    assert not (d / run_layout.EXIT_TRIGGER).exists()  # consumed, so the restart runs
    assert res["rc2"] == 0
    _assert_resume_exact(dist_fp32_ref, d, k)


# --------------------------------------------------------------------------- outputs


def test_metrics_jsonl_schema_and_eval_records(tp_ref):
    lines = (tp_ref / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    train = [r for r in recs if r["kind"] == "train"]
    keys = {"iteration", "consumed_samples", "lm_loss", "lr", "grad_norm", "loss_scale", "step_time_ms",
            "tokens_per_s", "tflops_per_gpu", "skipped", "nan", "global_batch_size", "restart_count", "time"}
    assert all(keys <= r.keys() for r in train)
    assert [r["consumed_samples"] for r in train] == [8 * i for i in range(1, 21)]
    assert all(r["tokens_per_s"] > 0 and r["tflops_per_gpu"] > 0 for r in train)
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [r["iteration"] for r in evals] == [10, 20]
    assert all(r["lm_loss"] > 0 for r in evals)
    log = (tp_ref / "run.log").read_text()
    assert "iteration       20/      20 | consumed samples:          160" in log
    assert "validation loss at iteration 10" in log


def test_tensorboard_has_the_loss_scalar(tp_ref):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list((tp_ref / "tensorboard").glob("events.out.tfevents.*"))
    assert files
    acc = EventAccumulator(str(tp_ref / "tensorboard"))
    acc.Reload()
    loss = acc.Scalars("train/lm_loss")
    assert [e.step for e in loss] == list(range(1, 21))
    assert abs(loss[-1].value - _by_iter(tp_ref)[20]["lm_loss"]) < 1e-4


def test_profiler_trace_and_env_dump(tp_ref):
    traces = list((tp_ref / "debug").glob("torch-trace-*-rank0.json"))
    assert len(traces) == 1
    trace = json.loads(traces[0].read_text())
    assert trace["traceEvents"]
    assert not list((tp_ref / "debug").glob("torch-trace-*-rank1.json"))  # ranks: [0]
    dumps = sorted((tp_ref / "debug").glob("env-*-rank*.json"))
    assert len(dumps) == 2
    env = json.loads(dumps[0].read_text())
    assert env["versions"]["megatron-core"] == "0.19.2"
    assert env["topology"]["tp"] == 2


def test_cpu_runs_are_strict_device_checked(tp_ref):
    log = (tp_ref / "run.log").read_text()
    assert "[mtk] strict device checks on" in log


def test_checkpoint_layout_and_tracker(tr, tp_ref):
    ckpt = tp_ref / "checkpoints"
    assert tr.tracker(ckpt) == 20
    assert sorted(p.name for p in ckpt.iterdir()) == ["iter_0000010", "iter_0000020",
                                                     "latest_checkpointed_iteration.txt"]
    assert tr.last_exit(tp_ref)["checkpoint_iteration"] == 20
    for it in (10, 20):  # each checkpoint carries the pretrain_gpt.py arguments that continue it
        text = (ckpt / f"iter_{it:07d}" / "megatron_lm_args.txt").read_text()
        assert f"(iteration {it})" in text and f"  --load {ckpt}\n" in text


def test_the_arguments_render_shows_are_the_ones_the_run_writes(tp_ref):
    """``megatron_lm_args.txt`` from ``mtk render`` / the dry run (before the run, launcher/megatron_args_file.py) is
    the array the run writes beside its checkpoints, flag for flag, for the run's own job."""
    from mtk.launcher.megatron_args_file import args_file

    from mtk.spec.loader import load_job_json

    ckpt = (tp_ref / "checkpoints").resolve()
    job = load_job_json(tp_ref / "job.json")
    checkpoint = job.train.checkpoint.model_copy(update={"dir": str(ckpt)})  # where a launch puts it
    job = job.model_copy(update={"train": job.train.model_copy(update={"checkpoint": checkpoint})})

    def array(text: str) -> str:
        return text[text.index("MEGATRON_LM_ARGS=("):]

    written = (ckpt / "iter_0000010" / "megatron_lm_args.txt").read_text()
    assert array(args_file(job)) == array(written)


def test_each_save_is_timed_into_the_run_dir_for_the_interval_advice(tp_ref, sp_crash):
    """Rank 0 records every published save's phases (state/checkpoint_saves.jsonl): what `mtk validate` turns into
    the Young/Daly interval. The sharding is checked on the first save only (train.checkpoint.
    assume_constant_structure, the default); an async save's blocking part is its plan, its write runs behind."""
    from mtk import goodput

    sync = [json.loads(line) for line in (tp_ref / goodput.SAVES_FILE).read_text().splitlines()]
    assert [r["iteration"] for r in sync] == [10, 20], sync
    assert [r["validated"] for r in sync] == [True, False], sync
    assert all(r["mode"] == "sync" and r["ranks"] == 2 and r["blocking_s"] >= r["write_s"] > 0 for r in sync), sync
    run_dir, _after_crash, rc2 = sp_crash
    assert rc2 == 0
    recs = [json.loads(line) for line in (run_dir / goodput.SAVES_FILE).read_text().splitlines()]
    background = [r for r in recs if r["mode"] == "async"]
    assert background and all(r["blocking_s"] == r["plan_s"] and r["write_s"] > 0 for r in background), recs
