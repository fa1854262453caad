"""A folder mixture (0.8 / 0.2) trains through `mtk launch --backend local`, with the debug switches on.

On CPU the ranks talk gloo, so NCCL writes nothing: what is checked is that every rank received the NCCL
debug environment pointing into the run dir (from the per-rank environment dumps), and that the
torch.profiler trace lands there and loads.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.integration


def write_prefix(prefix: Path, docs: int, seed: int) -> None:
    from mtk.training import compat

    compat.install_import_stubs()
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for _ in range(docs):
        n = int(rng.integers(30, 120))
        builder.add_document(rng.integers(0, 300, n), [n])
    builder.finalize(f"{prefix}.idx")


def test_folder_mixture_trains_with_nccl_debug_and_profiler(tmp_path):
    data = tmp_path / "data"
    write_prefix(data / "web" / "part-0", 200, 1)
    write_prefix(data / "web" / "part-1", 100, 2)
    write_prefix(data / "code" / "all", 150, 3)
    sets = [
        "name=mix", f"cluster.runs_dir={tmp_path / 'runs'}", f"data.dir={data}",
        "data.folders=[{path: web, weight: 0.8}, {path: code, weight: 0.2}]",
        "data.num_workers=0", "train.iterations=8", "train.eval_interval=4",
        "debug.nccl_debug=true", "debug.nccl_flight_recorder=true",
        "debug.torch_profiler={enabled: true, start: 3, stop: 5, ranks: [0, 1]}",
    ]
    args = [sys.executable, "-m", "mtk", "launch", str(ROOT / "examples" / "tiny.yaml"), "--backend", "local"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    run_dir = Path([line for line in out.stdout.splitlines() if line.startswith("run: ")][-1][5:])

    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = {r["iteration"]: r["lm_loss"] for r in records if r.get("kind", "train") == "train"}
    assert sorted(train) == list(range(1, 9))
    assert all(math.isfinite(v) for v in train.values()) and train[8] < train[1]
    log = (run_dir / "logs" / "train.log").read_text()
    assert "web" in log and "code" in log, "the mixture table was not printed"

    debug = run_dir / "debug"
    dumps = sorted(debug.glob("env-*-rank*.json"))
    assert len(dumps) == 2, dumps
    for dump in dumps:
        env = json.loads(dump.read_text())["env"]
        assert env["NCCL_DEBUG"] == "INFO"
        assert env["NCCL_DEBUG_FILE"].startswith(f"{run_dir}/debug/nccl.")
        assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(f"{run_dir}/debug/")
    traces = sorted(debug.glob("torch-trace-*-rank*.json"))
    assert len(traces) == 2
    assert json.loads(traces[0].read_text())["traceEvents"]
