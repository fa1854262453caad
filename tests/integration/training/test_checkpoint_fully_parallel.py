"""train.checkpoint.fully_parallel_save: replicated shards (the same weights on every data-parallel rank) are
written by all ranks, not only the first one's, and read back whole; assume_constant_structure keeps the save's
plans and the distribution from the second save on. Two real gloo processes through CheckpointManager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ports import free_port

REPO = Path(__file__).resolve().parents[3]

WORKER = r"""
import json, os, sys, warnings
warnings.filterwarnings("ignore")
from mtk.training import compat
compat.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo")
from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from mtk.training.checkpoint import CheckpointManager
rank = dist.get_rank()
root = os.environ["ROOT"]
fully = os.environ["FULLY"] == "1"
def state(fill):
    # four weights replicated over the two (data-parallel) ranks: replica_id is the rank
    return {f"w{k}": ShardedTensor.from_rank_offsets(f"w{k}", torch.full((256, 256), fill + k), replica_id=rank)
            for k in range(4)}
mgr = CheckpointManager(root + "/ckpt", owner=root + "/run", log=lambda m: None, fully_parallel=fully)
for it in (1, 2):
    mgr.begin(it)
    mgr.save_sharded(it, state(float(it)), None)
loaded = dist_checkpointing.load(state(0.0), root + "/ckpt/iter_0000002")
ok = all(torch.equal(loaded[f"w{k}"], torch.full((256, 256), 2.0 + k)) for k in range(4))
if rank == 0:
    json.dump({"ok": ok, "strategy": type(mgr.strategy()).__name__}, open(root + "/result.json", "w"))
dist.barrier()
dist.destroy_process_group()
"""


def _save_twice(tmp: Path, fully: bool) -> tuple[dict, dict[str, int]]:
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "ROOT": str(tmp), "FULLY": "1" if fully else "0", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env={**env, "RANK": str(r)}, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    files = {f.name: f.stat().st_size for f in (tmp / "ckpt" / "iter_0000002").glob("*.distcp")}
    return json.loads((tmp / "result.json").read_text()), files


@pytest.mark.parametrize("fully", [True, False])
def test_replicated_weights_are_written_by_every_rank_only_when_fully_parallel(tmp_path, fully):
    result, files = _save_twice(tmp_path, fully)
    assert result["ok"], result
    assert result["strategy"] == ("FullyParallelSaveStrategyWrapper" if fully else "TorchDistSaveShardedStrategy")
    one_weight = 256 * 256 * 4
    by_rank = {r: sum(size for name, size in files.items() if name.startswith(f"__{r}_")) for r in (0, 1)}
    if fully:  # two weights each
        assert by_rank[0] >= 2 * one_weight and by_rank[1] >= 2 * one_weight, files
    else:  # the first rank writes all four, the second none
        assert by_rank[0] >= 4 * one_weight and by_rank[1] < one_weight, files
    recs = [json.loads(line) for line in (tmp_path / "run" / "state" / "checkpoint_saves.jsonl").read_text()
            .splitlines()]
    assert [r["validated"] for r in recs] == [True, False]
