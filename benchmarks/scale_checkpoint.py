"""Checkpoint coordination at scale (issue 45, 1c): what a save blocks training for beyond writing the data.

mtk's save (training/checkpoint.py, CheckpointManager.save_sharded) is megatron-core's torch_dist save, in three
phases: **plan** (the sharding-integrity check: an ``all_gather_object`` of every rank's shard metadata to every
rank, then rank 0 checks every tensor's coverage; each rank's local write plan; the coordinator's global plan:
dedup, metadata, validation), **write** (each rank its own shards) and **publish** (the coordinator gathers the
write results and writes ``.metadata``; rank 0 renames the partial dir and moves the tracker).

Three parts:

* in-process, N nodes up to 1,024 (8,192 ranks): the coordinator's work given N ranks' inputs, through the real
  classes (``MCoreSavePlanner.create_global_plan`` + ``FileSystemWriterAsync.prepare_global_plan``; megatron's
  ``validate_sharding_integrity``; the pickled metadata each rank receives in the check's all-gather and the time
  to unpickle it; the ``.metadata`` pickle). The shard layout is a GPT of ``MODEL_TENSORS`` tensors at tp = 8 (one
  node), pp = 1, the distributed optimizer's dp_reshardable state (mtk's default): ``OPTIM_OBJECTS`` objects per
  rank. 2 cores cannot run 8,192 ranks; one coordinator given their inputs is what is measured.
* real gloo ranks (1 … 16, fewer in --quick): three saves of a sharded state dict through CheckpointManager
  (begin + save_sharded, the code the engine runs), with ``assume_constant_structure`` off (mtk before issue 45)
  and on (mtk's default now): each save's plan / write / publish seconds, first vs later saves; and with it on,
  four saves of a state dict that gains a tensor at the third (Adam's state appearing): that save is planned and
  checked anew, the fourth is cached again.
* the check that makes the cache safe (issue 49, ``training/save_structure.py``): before a save reuses the
  cached plans every rank compares its state dict's structure with the plans' — local, in-process here for one
  rank's shards of the layout above (constant in N: a rank's shard count does not grow with the nodes) — and the
  ranks agree in one all-reduce of one number (in the gloo records' ``check_s``; the loop already all-reduces a
  few numbers every iteration, so a save adds one such collective).

    python benchmarks/scale.py --only checkpoint [--quick]
    python benchmarks/scale_checkpoint.py [--quick]      # this component alone, table printed
    python benchmarks/scale_checkpoint.py --gloo 1,2,4   # the real ranks' per-save records alone, as a table
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scale_core import RANKS_PER_NODE, Series  # noqa: E402
from support.ports import free_port as _free_port  # noqa: E402

TP = 8
MODEL_TENSORS = 12 * 32 + 3  # a 32-layer GPT: 12 tensors per layer (weights, biases, norms) + embedding/output/norm
OPTIM_OBJECTS = 4  # dp_reshardable: per rank, one object per (buffer, dtype) for param, exp_avg, exp_avg_sq, step
TARGET_S = 5.0  # issue 45: checkpoint coordination ≤ 5 s from the second save on at 1,024 nodes


def _quiet_megatron() -> None:
    import warnings

    warnings.filterwarnings("ignore")
    from mtk.training import compat

    compat.install()


def _one_rank_world() -> None:
    """megatron's validation asks torch.distributed for the rank: a 1-rank gloo group in this process."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)


# --------------------------------------------------------------------------- in-process: the coordinator's work

def local_plans(ranks: int) -> list:
    """Each rank's local SavePlan as MCoreSavePlanner.create_local_plan makes it for the layout above: the model's
    main replicas (data-parallel rank 0, one tp shard of each tensor), every rank's optimizer objects, rank 0's
    common state."""
    import torch
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
    from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

    props = TensorProperties(dtype=torch.bfloat16)
    rows = 4096
    plans = []
    for rank in range(ranks):
        tp, dp = rank % TP, rank // TP
        items = []
        if dp == 0:
            for k in range(MODEL_TENSORS):
                offsets = torch.Size([tp * rows, 0])
                items.append(WriteItem(index=MetadataIndex(f"decoder.t{k}.weight", offsets), type=WriteItemType.SHARD,
                                       tensor_data=TensorWriteData(
                                           chunk=ChunkStorageMetadata(offsets=offsets, sizes=torch.Size([rows, 4096])),
                                           properties=props, size=torch.Size([TP * rows, 4096]))))
        for k in range(OPTIM_OBJECTS):
            key = f"optimizer.distributed.dp_group_idx_0.gbuf_idx_0.bucket_{k}/shard_0.{tp}.{dp}"
            items.append(WriteItem(index=MetadataIndex(key), type=WriteItemType.BYTE_IO))
        if rank == 0:
            items.append(WriteItem(index=MetadataIndex("common_state/shard_0"), type=WriteItemType.BYTE_IO))
        plans.append(SavePlan(items))
    return plans


def rank_state_dict(rank: int, ranks: int) -> dict:
    """One rank's sharded state dict for the layout (tensors on the meta device: the check reads no data)."""
    import torch
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    tp, dp = rank % TP, rank // TP
    local = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    sd: dict = {f"decoder.t{k}.weight": ShardedTensor.from_rank_offsets(f"decoder.t{k}.weight", local, (0, tp, TP),
                                                                        replica_id=dp)
                for k in range(MODEL_TENSORS)}
    sd["optimizer"] = [ShardedObject(f"optimizer.bucket_{k}", None, (TP, max(1, ranks // TP)), (tp, dp))
                       for k in range(OPTIM_OBJECTS)]
    return sd


def structure_check_seconds(ranks: int, repeats: int = 20) -> float:
    """The check's local part on one rank (its shards' structure, compared with the cached one): best of
    ``repeats``. The all-reduce that follows is one number (timed on real ranks in the gloo records)."""
    from mtk.training.save_structure import structure

    sd = rank_state_dict(min(ranks - 1, TP + 1), ranks)
    cached = structure(sd)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        same = structure(sd) == cached
        best = min(best, time.perf_counter() - t0)
    assert same
    return best


def global_plan_seconds(ranks: int, repeats: int = 1) -> tuple[float, float]:
    """(create_global_plan + prepare_global_plan seconds, .metadata pickle seconds) for `ranks` local plans."""
    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync
    from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner

    best, meta_s = float("inf"), float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            plans = local_plans(ranks)
            planner = MCoreSavePlanner(dedup_replicated_tensors=False, flatten_state_dict=False,
                                       flatten_sharded_tensors=False)
            writer = FileSystemWriterAsync(tmp)
            t0 = time.perf_counter()
            plans, metadata = planner.create_global_plan(plans)
            writer.prepare_global_plan(plans)
            best = min(best, time.perf_counter() - t0)
            t0 = time.perf_counter()
            pickle.dumps(metadata)  # what storage_writer.finish writes as .metadata (with the write results)
            meta_s = min(meta_s, time.perf_counter() - t0)
    return best, meta_s


def rank_metadata(rank: int, ranks: int) -> list:
    """One rank's shard metadata as determine_global_metadata gathers it (ShardedTensor/Object without data): every
    model tensor's shard (main replica on data-parallel rank 0, a replica elsewhere) and the optimizer objects."""
    import torch
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    tp, dp = rank % TP, rank // TP
    local = torch.empty(4, 4, device="meta")
    out = [ShardedTensor.from_rank_offsets(f"decoder.t{k}.weight", local, (0, tp, TP), replica_id=dp).without_data()
           for k in range(MODEL_TENSORS)]
    out += [ShardedObject(f"optimizer.bucket_{k}", None, (TP, max(1, ranks // TP)), (tp, dp)).without_data()
            for k in range(OPTIM_OBJECTS)]
    return out


def sharding_check(ranks: int) -> tuple[float, float, float]:
    """(MB each rank receives in the check's all_gather_object, seconds to unpickle them on every rank, rank 0's
    validate_sharding_integrity seconds) at `ranks`."""
    from megatron.core.dist_checkpointing.validation import validate_sharding_integrity

    _one_rank_world()
    blobs = [pickle.dumps(rank_metadata(r, ranks)) for r in range(min(ranks, 2 * TP))]
    # ranks beyond the first two nodes pickle alike (only offsets and replica ids differ): reuse their sizes
    sizes = [len(blobs[r % len(blobs)]) for r in range(ranks)]
    gathered = [rank_metadata(r, ranks) for r in range(ranks)]  # the true offsets/replicas, for the check itself
    gc.collect()
    gc.disable()  # the collector's passes over millions of objects are this process's, not the save's
    try:
        t0 = time.perf_counter()
        copies = [pickle.loads(blobs[r % len(blobs)]) for r in range(ranks)]
        unpickle_s = time.perf_counter() - t0
        del copies
        t0 = time.perf_counter()
        validate_sharding_integrity(gathered, common_state_dict=None)
        validate_s = time.perf_counter() - t0
    finally:
        gc.enable()
    return sum(sizes) / 1e6, unpickle_s, validate_s


# --------------------------------------------------------------------------- real gloo ranks

WORKER = r"""
import json, os, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.environ["MTK_REPO"])
from mtk.training import compat
compat.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo")
from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
from mtk.training.checkpoint import CheckpointManager
rank, world = dist.get_rank(), dist.get_world_size()
root = os.environ["CKPT_ROOT"]
def state(extra=False):
    sd = {f"decoder.t{k}.weight": ShardedTensor.from_rank_offsets(f"decoder.t{k}.weight",
          torch.full((64, 64), float(rank)), (0, rank, world)) for k in range(int(os.environ["TENSORS"]))}
    if extra:  # a tensor that appears mid-run (Adam's state after a save before the first step)
        sd["optimizer.exp_avg"] = ShardedTensor.from_rank_offsets("optimizer.exp_avg", torch.zeros(64, 64),
                                                                  (0, rank, world))
    sd["optimizer"] = ShardedObject("optimizer.bucket_0", {"r": rank}, (world,), (rank,))
    return sd
result = {}
# one set of processes for all: the imports are most of the wall time here
for name, cached, saves in (("off", False, 3), ("on", True, 3), ("changed", True, 4)):
    base = f"{root}/{name}"
    mgr = CheckpointManager(base + "/ckpt", owner=base + "/run", log=lambda m: None,
                            assume_constant_structure=cached)
    for it in range(1, saves + 1):
        mgr.begin(it)
        mgr.save_sharded(it, state(extra=name == "changed" and it >= 3), None)
    if rank == 0:
        result[name] = [json.loads(l) for l in open(base + "/run/state/checkpoint_saves.jsonl")]
if rank == 0:
    json.dump(result, open(root + "/result.json", "w"))
dist.barrier()
dist.destroy_process_group()
"""


def gloo_saves(world: int, tensors: int = 64) -> dict[str, list[dict]]:
    """Three saves with assume_constant_structure off, three with it on, four with it on and a tensor added at the
    third, on `world` real gloo ranks (separate processes): the records CheckpointManager wrote, by run."""
    with tempfile.TemporaryDirectory(prefix="mtk-scale-ckpt-") as tmp:
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(world),
               "CKPT_ROOT": tmp, "TENSORS": str(tensors), "MTK_REPO": str(REPO), "OMP_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, "-c", WORKER], env={**env, "RANK": str(r)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(world)]
        outs = [p.communicate(timeout=900)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"gloo save at {world} ranks failed:\n" + "\n".join(o[-2000:] for o in outs))
        return json.loads((Path(tmp) / "result.json").read_text())


# --------------------------------------------------------------------------- measure

def measure(quick: bool) -> list[Series]:
    _quiet_megatron()
    check_nodes = [1, 4, 16, 32] if quick else [1, 4, 16, 64, 128]
    plan_nodes = check_nodes + ([256] if quick else [256, 1024])
    plan_s, meta_s = [], []
    for n in plan_nodes:
        p, m = global_plan_seconds(n * RANKS_PER_NODE, repeats=3)
        plan_s.append(p)
        meta_s.append(m)
    check_s = [structure_check_seconds(n * RANKS_PER_NODE) for n in plan_nodes]
    mb, unpickle, validate = [], [], []
    for n in check_nodes:
        a, b, c = sharding_check(n * RANKS_PER_NODE)
        mb.append(a)
        unpickle.append(b)
        validate.append(c)
    layout = (f"GPT of {MODEL_TENSORS} tensors, tp={TP}, pp=1, dp=N, dp_reshardable optimizer ({OPTIM_OBJECTS} "
              "objects per rank)")
    out = [
        Series("checkpoint", "global plan at the coordinator (uncached save)", "s", plan_nodes, plan_s,
               note=f"MCoreSavePlanner.create_global_plan + FileSystemWriterAsync.prepare_global_plan, in-process, "
                    f"{layout}; with assume_constant_structure skipped from the third save"),
        Series("checkpoint", ".metadata pickle at the coordinator (every save)", "s", plan_nodes, meta_s,
               note="storage_writer.finish's payload: the global Metadata, written once per save"),
        Series("checkpoint", "sharding check: metadata each rank receives", "MB", check_nodes, mb,
               note="all_gather_object of every rank's shard metadata to every rank: total traffic = N x this "
                    "(quadratic); with assume_constant_structure only on the first save"),
        Series("checkpoint", "sharding check: unpickle on each rank", "s", check_nodes, unpickle,
               note="every rank unpickles all ranks' metadata (in-process, this machine's core)"),
        Series("checkpoint", "sharding check: rank 0 validation", "s", check_nodes, validate,
               note="megatron's validate_sharding_integrity on the gathered metadata"),
    ]
    k = len(check_nodes)
    out += [
        Series("checkpoint", "blocking coordination per save, mtk before (re-check, re-plan)", "s", check_nodes,
               [unpickle[i] + validate[i] + plan_s[i] + meta_s[i] for i in range(k)], target=TARGET_S,
               note="a new strategy and the sharding check every save: unpickle + rank 0 check + global plan + "
                    ".metadata (the all-gather's transfer not counted)"),
        Series("checkpoint", "blocking coordination, second save (mtk now)", "s", plan_nodes,
               [p + m for p, m in zip(plan_s, meta_s, strict=True)], target=TARGET_S,
               note="assume_constant_structure: no sharding check; the plans are gathered once more to validate "
                    "the cache"),
        Series("checkpoint", "blocking coordination, third save on (mtk now)", "s", plan_nodes, meta_s,
               target=TARGET_S, note="cached central plan: only the coordinator's .metadata"),
        Series("checkpoint", "structure check before a cached save, local part (every rank)", "s", plan_nodes,
               check_s, note=f"training/save_structure.py on one rank's {MODEL_TENSORS + OPTIM_OBJECTS} shards, "
                             "in-process; then one all-reduce of one number (gloo records: check_s)"),
    ]
    out += _gloo_series(quick)
    return out


def _gloo_series(quick: bool) -> list[Series]:
    worlds = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
    done, stopped = [], ""
    per: dict[int, dict[str, list[dict]]] = {}
    for world in worlds:
        try:
            per[world] = gloo_saves(world)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            stopped = f"; stopped before {world} ranks: {str(exc).splitlines()[0]}"
            break
        done.append(world)
    series = []
    for run, tag in (("off", "assume_constant_structure=false (mtk before)"),
                     ("on", "assume_constant_structure=true (mtk's default)")):
        for idx, which in ((0, "first save"), (1, "second save"), (2, "third save")):
            recs = [per[w][run][idx] for w in done]
            series.append(Series("checkpoint", f"gloo {which} plan, {tag} (n = ranks, 2 cores: no law)", "s", done,
                                 [r["plan_s"] for r in recs],
                                 note=f"real gloo processes on 2 cores, CheckpointManager.save_sharded; of it the "
                                      f"structure check {[round(r.get('check_s', 0.0), 4) for r in recs]} s; write "
                                      f"{[round(r['write_s'], 3) for r in recs]} s, publish "
                                      f"{[round(r['publish_s'], 3) for r in recs]} s, sharding checked "
                                      f"{[r['validated'] for r in recs]}, cached central plan "
                                      f"{[r.get('cached_plan') for r in recs]}{stopped}"))
    for idx in range(4):
        recs = [per[w]["changed"][idx] for w in done]
        series.append(Series("checkpoint", f"gloo save {idx + 1} plan, a tensor added at save 3 (n = ranks, 2 "
                             "cores: no law)", "s", done, [r["plan_s"] for r in recs],
                             note=f"structure check {[round(r['check_s'], 4) for r in recs]} s; changed "
                                  f"{[r['structure_changed'] for r in recs]}, sharding checked "
                                  f"{[r['validated'] for r in recs]}, cached central plan "
                                  f"{[r['cached_plan'] for r in recs]}{stopped}"))
    return series


def coordination_at(nodes: int, all_series: list[Series]) -> dict[str, float]:
    """The blocking coordination of a later save at `nodes`, before and after, from the fitted series."""
    from scale_core import fit

    by = {s.metric: fit(s).at(nodes) for s in all_series if s.component == "checkpoint"}
    check = by["sharding check: unpickle on each rank"] + by["sharding check: rank 0 validation"]
    plan = by["global plan at the coordinator (uncached save)"]
    meta = by[".metadata pickle at the coordinator (every save)"]
    return {"before (every save re-checks and re-plans)": check + plan + meta,
            "after, second save (re-plans once to validate the cache)": plan + meta,
            "after, third save on (cached plan)": meta}


def gloo_table(world_list: list[int]) -> str:
    """Per-save records of the real gloo ranks as a markdown table: plan (its structure check), sharding checked,
    cached central plan."""
    rows = ["| ranks | run | save | plan s | of it: check s | sharding checked | cached central plan |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for world in world_list:
        got = gloo_saves(world)
        for run in ("off", "on", "changed"):
            for i, r in enumerate(got[run]):
                rows.append(f"| {world} | {run} | {i + 1} | {r['plan_s']:.4f} | {r.get('check_s', 0.0):.5f} | "
                            f"{r['validated']} | {r.get('cached_plan')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from scale_core import table

    if "--gloo" in sys.argv:  # the real-rank records alone: python scale_checkpoint.py --gloo 1,2,4
        _quiet_megatron()
        print(gloo_table([int(x) for x in sys.argv[sys.argv.index("--gloo") + 1].split(",")]))
        sys.exit(0)
    got = measure("--quick" in sys.argv)
    print(table(got))
    for k, v in coordination_at(1024, got).items():
        print(f"coordination at 1,024 nodes, {k}: {v:.2f} s (target ≤ {TARGET_S:g} s)")
