"""One torchrun rank: checkpoints whose state dict changes structure between saves, through mtk's CheckpointManager
with ``assume_constant_structure`` on (megatron-core's cached save plans), each save read back whole.

    torchrun --standalone --nproc-per-node 2 save_cache_driver.py OUT_DIR JOB_JSON

Two parts, in one pair of processes (their start is most of the cost):

* ``trainer``: the real trigger. A tiny GPT (dp = 2, megatron-core's optimizer) saved through ``Trainer.save``
  before its first optimizer step (Adam has no state yet: what fp16's skipped first steps leave too), then after
  one step (``exp_avg``/``exp_avg_sq`` appear in the state dict), then after another. Each later save is read back
  into the optimizer and its Adam state compared with what was saved. (megatron-core's distributed optimizer
  cannot save before a step here at all: without Apex/TE its ``state_dict`` asserts on the missing ``step``.)
* ``scenarios``: sharded state dicts built here, saved with ``CheckpointManager.begin`` + ``save_sharded`` (what
  ``save`` runs after building the state dict): a key added at the second or third save, a shape, dtype or
  sharding change, a key removed, a key added on one rank only, no change at all, and a key added at the third
  save with ``fully_parallel_save`` (its cached save distribution). After every save its
  ``.metadata`` is compared with the state dict saved and the checkpoint is loaded and compared value by value.

Rank 0 writes ``OUT_DIR/result.json``: per part and save, whether it loaded whole, the save records
(``state/checkpoint_saves.jsonl``) and the manager's log lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from torch.distributed.checkpoint import CheckpointException

WORLD = 2


# what a failed save or load raises: torch's CheckpointException derives from BaseException
FAILURES = (Exception, CheckpointException)


def spec_for(name: str, save: int, rank: int) -> dict:
    """Scenario ``name``'s state dict at ``save`` (0-based) on ``rank``: key -> (rows, cols, dtype, axis).
    ``axis`` is the dimension the tensor is split over the ranks; None: one whole tensor on this rank only."""
    name = name.removesuffix(FULLY_PARALLEL)
    f32, bf16 = "float32", "bfloat16"
    a, b = ("a", (8, 4, f32, 0)), ("b", (6, 2, f32, 1))
    table: dict[str, list[dict]] = {
        "added_at_2nd": [dict([a]), dict([a, b]), dict([a, b]), dict([a, b])],
        "added_at_3rd": [dict([a]), dict([a]), dict([a, b]), dict([a, b])],
        "shape_changed": [dict([a]), dict([a]), {"a": (12, 4, f32, 0)}, {"a": (12, 4, f32, 0)}],
        "dtype_changed": [dict([a]), dict([a]), {"a": (8, 4, bf16, 0)}],
        "sharding_changed": [dict([a]), dict([a]), {"a": (8, 4, f32, 1)}],
        "removed": [dict([a, b]), dict([a, b]), dict([a]), dict([a])],
        "unchanged": [dict([a, b])] * 4,
    }
    if name == "added_on_rank1_only":  # rank 0 sees no change: it must replan all the same
        extra = {"r1_only": (3, 3, f32, None)} if rank == 1 and save >= 2 else {}
        return {**dict([a]), **extra}
    return table[name][save]


SCENARIOS = ["added_at_2nd", "added_at_3rd", "shape_changed", "dtype_changed", "sharding_changed", "removed",
             "added_on_rank1_only", "unchanged", "added_at_3rd_fully_parallel"]
FULLY_PARALLEL = "_fully_parallel"  # the scenario saved with train.checkpoint.fully_parallel_save


def saves_of(name: str) -> int:
    name = name.removesuffix(FULLY_PARALLEL)
    return 4 if name in ("added_at_2nd", "added_at_3rd", "shape_changed", "removed", "unchanged",
                         "added_on_rank1_only") else 3


def build(spec: dict, save: int, rank: int, empty: bool = False) -> dict:
    """The sharded state dict of ``spec``: values that differ per key, save and shard (zeros for a load)."""
    import torch
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    out: dict = {}
    for k, (rows, cols, dtype, axis) in spec.items():
        shape = (rows, cols) if axis is None else ((rows // WORLD, cols) if axis == 0 else (rows, cols // WORLD))
        value = torch.zeros(shape) if empty else (
            torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + 1000 * save + 100 * len(k))
        if not empty and axis is not None:
            value = value.chunk(WORLD, dim=axis)[rank].contiguous()
        value = value.to(getattr(torch, dtype))
        if axis is None:
            out[k] = ShardedTensor.from_rank_offsets(k, value)
        else:
            out[k] = ShardedTensor.from_rank_offsets(k, value, (axis, rank, WORLD))
    out["extra"] = ShardedObject("extra", {"save": save}, (WORLD,), (rank,))
    return out


def check_saved(path: Path, name: str, save: int, rank: int) -> dict:
    """Whether ``path``'s ``.metadata`` holds exactly the tensors of every rank's state dict at ``save`` (global
    shapes, dtypes) and the load gives this rank the values it saved."""
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    spec = spec_for(name, save, rank)
    meta = dist_checkpointing.load_tensors_metadata(str(path))
    want = {k: ((v[0], v[1]), v[2]) for r in range(WORLD) for k, v in spec_for(name, save, r).items()}
    got = {k: (tuple(v.global_shape), str(v.dtype).removeprefix("torch.")) for k, v in meta.items()}
    try:
        loaded = dist_checkpointing.load(build(spec, save, rank, empty=True), str(path))
        expected = build(spec, save, rank)
        values = all(torch.equal(loaded[k], expected[k].data) for k in spec) and loaded["extra"] == {"save": save}
        error = ""
    except FAILURES as exc:  # a checkpoint that does not load is the failure this records
        values, error = False, f"{type(exc).__name__}: {str(exc)[:300]}"
    ok = torch.tensor([1.0 if values else 0.0], device=torch.cuda.current_device())
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return {"metadata_ok": got == want, "metadata": got, "want": want, "loads_whole": bool(ok.item()),
            "error": error}


def scenarios(out: Path) -> dict:
    import torch.distributed as dist
    from mtk.training.checkpoint import CheckpointManager, iter_dir_name

    rank = dist.get_rank()
    results = {}
    for name in SCENARIOS:
        root = out / "scenarios" / name
        lines: list[str] = []
        mgr = CheckpointManager(root / "ckpt", owner=root / "run", log=lines.append,
                                fully_parallel=name.endswith(FULLY_PARALLEL))
        saves = []
        for save in range(saves_of(name)):
            spec = spec_for(name, save, rank)
            iteration = save + 1
            try:
                mgr.begin(iteration)
                mgr.save_sharded(iteration, build(spec, save, rank), None)
            except FAILURES as exc:  # a save that fails is a failure this records (both ranks fail alike here)
                saves.append({"loads_whole": False, "error": f"save: {type(exc).__name__}: {str(exc)[:300]}"})
                break
            saves.append(check_saved(root / "ckpt" / iter_dir_name(iteration), name, save, rank))
        if rank == 0:
            records = [json.loads(x) for x in (root / "run" / "state" / "checkpoint_saves.jsonl").read_text()
                       .splitlines()]
            results[name] = {"saves": saves, "records": records, "log": lines}
    return results


def adam_state(optimizer) -> list:
    """Every inner Adam parameter's (exp_avg, exp_avg_sq), cloned (empty when Adam has not stepped)."""
    out = []
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        for group in opt.optimizer.param_groups:
            for p in group["params"]:
                st = opt.optimizer.state.get(p, {})
                if "exp_avg" in st:
                    out.append((st["exp_avg"].clone(), st["exp_avg_sq"].clone()))
    return out


def trainer_part(job_path: Path) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from mtk.training import checkpoint
    from mtk.training.loop import Trainer

    from mtk.spec.loader import load_job_json

    job = load_job_json(job_path)
    run_dir = job_path.parent
    trainer = Trainer(job, run_dir)
    lines: list[str] = []
    trainer.setup()
    trainer.ckpt.log = lines.append
    saved_state = {}
    for _ in range(3):  # save before the first optimizer step, after the first, after the second
        trainer.save()
        saved_state[trainer.iteration] = adam_state(trainer.optimizer)
        trainer.train_step()
        trainer.iteration += 1
        trainer.consumed += job.train.global_batch_size
    trainer.ckpt.wait()
    result: dict = {"log": lines}
    for it in (1, 2):
        path = trainer.ckpt.root / checkpoint.iter_dir_name(it)
        keys = sorted(dist_checkpointing.load_tensors_metadata(str(path)))
        try:
            checkpoint.load_checkpoint((path, it, False), trainer.model, trainer.optimizer, trainer.scheduler, job,
                                       trainer.tok.vocab_size, log=lambda m: None)
            now = adam_state(trainer.optimizer)
            same = len(now) == len(saved_state[it]) > 0 and all(
                torch.equal(x, y) for pair, old in zip(now, saved_state[it], strict=True)
                for x, y in zip(pair, old, strict=True))
            error = ""
        except FAILURES as exc:
            same, error = False, f"{type(exc).__name__}: {str(exc)[:300]}"
        ok = torch.tensor([1.0 if same else 0.0], device=torch.cuda.current_device())
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        result[str(it)] = {"exp_avg_keys": sum("exp_avg" in k for k in keys),
                           "adam_state_loads_whole": bool(ok.item()), "error": error}
    zero = trainer.ckpt.root / checkpoint.iter_dir_name(0)
    result["0"] = {"exp_avg_keys": sum("exp_avg" in k for k in dist_checkpointing.load_tensors_metadata(str(zero)))}
    from mtk.goodput import SAVES_FILE

    if dist.get_rank() == 0:
        result["records"] = [json.loads(x) for x in (run_dir / SAVES_FILE).read_text().splitlines()]
    trainer.close()
    return result


def main(out_dir: str, job_json: str) -> None:
    from mtk.training import compat

    compat.install()  # before megatron.core is imported
    import torch.distributed as dist

    out = Path(out_dir)
    result = {"trainer": trainer_part(Path(job_json)), "scenarios": scenarios(out)}
    if dist.get_rank() == 0:
        (out / "result.json").write_text(json.dumps(result, indent=1, default=str))
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
