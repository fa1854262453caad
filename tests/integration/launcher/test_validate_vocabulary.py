"""`mtk validate` counts the model training builds: with the demo's 1,024-token BPE and a spec that says
`model.vocab_size: 512`, validate's total and per-GPU parameters equal those of the real model the engine builds
on CPU (its own tokenizer_info → build_model path, real parameters), each rank built in its own process under
torch's fake process group of the job's world size. The total is rebuilt from the ranks' own counts: the
tensor-parallel shards of every rank plus the replicated parameters (norms, row-parallel biases) once."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from mtk.launcher.cli import cli

from mtk.spec import load_job

pytestmark = [pytest.mark.integration, pytest.mark.megatron]  # megatron-core builds the model (and in validate's child)

ROOT = Path(__file__).resolve().parents[3]
CORPUS = str(ROOT / "examples" / "tiny-corpus.yaml")

BUILD = textwrap.dedent("""
    import json, sys
    from mtk.training import compat
    compat.install()
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from mtk.training import data, device_plan, model
    from mtk.spec.job import Job

    job = Job.model_validate_json(sys.stdin.read())
    p = job.parallel
    dist.init_process_group("fake", rank=int(sys.argv[1]), world_size=job.cluster.world_size)
    ps.initialize_model_parallel(tensor_model_parallel_size=p.tp, pipeline_model_parallel_size=p.pp,
                                 create_gloo_process_groups=False)  # the fake backend has no gloo groups
    plan = device_plan.plan(job, gpu=False, te=False)
    config = model.transformer_config(job, plan)
    tok = data.tokenizer_info(job)  # the engine's tokenizer, built by the tokenizers library
    params = [t for c in model.build_model(job, config, tok.vocab_size, plan, on_device=False) for t in c.parameters()]
    assert all(t.device.type == "cpu" for t in params)
    print(json.dumps({"own": sum(t.numel() for t in params), "vocab": tok.vocab_size,
                      "sharded": sum(t.numel() for t in params if getattr(t, "tensor_model_parallel", False))}))
""")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("make_demo_data", ROOT / "examples" / "make_demo_data.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    out = tmp_path_factory.mktemp("demo-data")
    assert demo.train_tokenizer(demo.documents(), out) == 1024  # what `make demo-data` writes
    return out


def _validate(sets: list[str]) -> tuple[int, int, str]:
    args = ["validate", CORPUS, "-q"] + [a for s in sets for a in ("--set", s)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    total = re.search(r"^parameters: .*\(([\d,]+)\)$", result.output, re.M)
    per_gpu = re.search(r"^parameters per GPU: .*\(([\d,]+), rank 0, from the megatron-core's meta-device model\)$",
                        result.output, re.M)
    assert total and per_gpu, result.output
    return int(total.group(1).replace(",", "")), int(per_gpu.group(1).replace(",", "")), result.output


def _built(sets: list[str], rank: int) -> dict:
    job = load_job(CORPUS, sets)
    proc = subprocess.run([sys.executable, "-c", BUILD, str(rank)], input=job.to_json(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tp", [2, 1])
def test_validate_counts_the_model_training_builds_with_the_demo_tokenizer(demo_dir, tp):
    sets = [f"data.dir={demo_dir}", "model.vocab_size=512", f"parallel.tp={tp}", f"cluster.procs_per_node={tp}"]
    total, per_gpu, output = _validate(sets)
    assert "vocabulary:              1,024 tokens, padded to 1,024 (data.tokenizer: " in output
    assert "note: vocabulary: model.vocab_size (512) is not read with a tokenizer" in output
    ranks = [_built(sets, rank) for rank in range(tp)]
    assert {r["vocab"] for r in ranks} == {1024}
    assert per_gpu == ranks[0]["own"]
    replicated = ranks[0]["own"] - ranks[0]["sharded"]
    assert all(r["own"] - r["sharded"] == replicated for r in ranks)
    assert total == sum(r["sharded"] for r in ranks) + replicated
    if tp == 2:
        assert per_gpu == 87_360  # the figure for this job (validate said 70.98K from model.vocab_size)
    else:
        assert total == per_gpu == ranks[0]["own"]
