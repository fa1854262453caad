"""How much mtk's policed checkpoint reader costs against the readers it replaces (issue 49).

mtk runs every checkpoint pickle through its own pickle machine (``mtk/checkpoint_unpickle``), a Python loop,
where torch/megatron-core would use C: ``pickle.loads`` for DCP's ``.metadata``, ``torch.load`` for the objects
and each tensor item. This prints, per file kind, the median time of each and the ratio, on Megatron-LM's
checkpoints (the test fixtures) and on a synthesized ``.metadata`` the size of a large model's (``--chunks``
entries, each a tensor chunk as DCP records it).

    .venv/bin/python benchmarks/checkpoint_read.py --repeat 5 --chunks 200000
"""

from __future__ import annotations

import argparse
import io
import pickle
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "megatron_lm"


def median_seconds(fn, repeat: int) -> float:
    fn()  # imports, caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthesized_metadata(chunks: int) -> bytes:
    """A DCP Metadata with ``chunks`` tensor chunks over chunks/64 tensors, pickled as torch's writer does."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    per, state, storage = 64, {}, {}
    for t in range(max(1, chunks // per)):
        fqn = f"decoder.layers.{t}.mlp.linear_fc1.weight"
        parts = [ChunkStorageMetadata(offsets=torch.Size([i * 128, 0]), sizes=torch.Size([128, 4096]))
                 for i in range(per)]
        state[fqn] = TensorStorageMetadata(TensorProperties(dtype=torch.bfloat16), torch.Size([per * 128, 4096]),
                                           parts)
        for i, chunk in enumerate(parts):
            storage[MetadataIndex(fqn, chunk.offsets, i)] = _StorageInfo(f"__{i}_0.distcp", t * 1048576, 1048576)
    return pickle.dumps(Metadata(state_dict_metadata=state, storage_data=storage))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--chunks", type=int, default=200_000, help="tensor chunks in the synthesized .metadata")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    warnings.simplefilter("ignore")
    import torch
    from mtk.training import compat
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    from mtk import checkpoint_unpickle as cu

    compat.install_import_stubs()  # torch.load of Megatron-LM's args imports megatron's enums
    rows = []
    for meta_path in sorted(FIXTURES.glob("*/checkpoints/*/.metadata")):
        raw = meta_path.read_bytes()
        name = meta_path.parent.parent.parent.name
        rows.append((f"{name} .metadata ({len(raw) // 1024} KiB)",
                     median_seconds(lambda raw=raw: cu.load_metadata(raw, "b"), args.repeat),
                     median_seconds(lambda raw=raw: pickle.loads(raw), args.repeat)))
        meta = pickle.loads(raw)  # the suite's own fixture
        objects, tensors = [], []
        for index, info in meta.storage_data.items():
            with open(meta_path.parent / info.relative_path, "rb") as fh:
                fh.seek(info.offset)
                data = fh.read(info.length)
            kind = isinstance(meta.state_dict_metadata[index.fqn], BytesStorageMetadata)
            (objects if kind else tensors).append(data)
        rows.append((f"{name} {len(objects)} objects",
                     median_seconds(lambda o=objects: [cu.load_torch(d, "b", "o", megatron_real=True) for d in o],
                                    args.repeat),
                     median_seconds(lambda o=objects: [torch.load(io.BytesIO(d), weights_only=False) for d in o],
                                    args.repeat)))
        rows.append((f"{name} {len(tensors)} tensors",
                     median_seconds(lambda t=tensors: [cu.load_tensor(d, "b") for d in t], args.repeat),
                     median_seconds(lambda t=tensors: [torch.load(io.BytesIO(d), weights_only=True) for d in t],
                                    args.repeat)))
    raw = synthesized_metadata(args.chunks)
    rows.append((f"synthesized .metadata, {args.chunks} chunks ({len(raw) // 2**20} MiB)",
                 median_seconds(lambda: cu.load_metadata(raw, "b"), max(1, args.repeat // 2)),
                 median_seconds(lambda: pickle.loads(raw), max(1, args.repeat // 2))))
    print(f"{'file kind':<58} {'mtk (s)':>9} {'reference (s)':>14} {'ratio':>7}")
    for label, ours, ref in rows:
        print(f"{label:<58} {ours:>9.4f} {ref:>14.4f} {ours / ref:>6.1f}x")
    print("reference: pickle.loads for .metadata, torch.load(weights_only=False) for objects, "
          "torch.load(weights_only=True) for tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
