"""``mtk convert`` between mtk checkpoints and Hugging Face directories, checked with transformers itself.

A tiny GPT (GPT-2 architecture) and a tiny Llama (RoPE, RMSNorm, SwiGLU, GQA 4 heads / 2 groups, untied
output layer) are trained by mtk at TP=2, PP=2 (torchrun, 4 CPU ranks, gloo, fp32) and exported; the HF
directories load with ``transformers.AutoModelForCausalLM`` and give mtk's logits (megatron-core's model
loading the same checkpoint at TP=PP=1) within 1e-4. HF → mtk → HF is bitwise per tensor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ARCHS = {
    "gpt": (),
    "llama": ("model.arch=llama", "model.position_embedding=rope", "model.normalization=RMSNorm",
              "model.activation=swiglu", "model.add_bias_linear=false", "model.num_query_groups=2",
              "model.untie_embeddings=true"),
}
TRAIN = ("train.precision=fp32", "train.iterations=3", "train.lr_warmup_iters=1", "train.lr=0.01")


def mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def _safetensors(d: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.fixture(scope="module", params=sorted(ARCHS))
def exported(request, tr, engine_root):
    arch = request.param
    run = engine_root / f"hf_{arch}_tp2pp2"
    tr.make_job(run, *ARCHS[arch], *TRAIN, "cluster.procs_per_node=4", "parallel.tp=2", "parallel.pp=2")
    assert tr.finish(tr.start(run, nproc=4), timeout=900) == 0, (run / "run.log").read_text()[-3000:]
    hf_dir = engine_root / f"hf_{arch}_export"
    res = mtk("convert", str(run / "checkpoints"), str(hf_dir), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    single = engine_root / f"hf_{arch}_tp1"
    tr.make_job(single, *ARCHS[arch], *TRAIN, "cluster.procs_per_node=1", "parallel.tp=1", "parallel.pp=1")
    out = single / "logits.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           str(HERE / "hf" / "logits.py"), "--job", str(single / "job.json"),
           "--checkpoint", str(run / "checkpoints"), "--hf", str(hf_dir), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=single, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return arch, run, hf_dir, json.loads(out.read_text())


def test_export_from_tp2_pp2_matches_transformers_logits(exported):
    arch, _run, hf_dir, logits = exported
    cfg = json.loads((hf_dir / "config.json").read_text())
    assert cfg["architectures"] == [{"gpt": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[arch]]
    assert logits["shape"] == [2, 64, 1024]
    assert logits["logit_scale"] > 0.1  # real logits, not zeros
    assert logits["max_abs_diff"] <= 1e-4, logits
    assert logits["argmax_equal"] == 1.0, logits


def test_hf_to_mtk_to_hf_is_bitwise(exported, engine_root):
    arch, _run, hf_dir, _ = exported
    ckpt = engine_root / f"hf_{arch}_imported"
    back = engine_root / f"hf_{arch}_roundtrip"
    res = mtk("convert", str(hf_dir), str(ckpt), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "release"
    res = mtk("convert", str(ckpt), str(back), "--quiet", cwd=engine_root)
    assert res.returncode == 0, res.stderr
    import torch

    a, b = _safetensors(hf_dir), _safetensors(back)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].view(-1).view(torch.uint8).equal(b[name].view(-1).view(torch.uint8)), name
    assert json.loads((hf_dir / "config.json").read_text()) == json.loads((back / "config.json").read_text())


def test_unsupported_architecture_is_refused(tmp_path):
    src = tmp_path / "mistral"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}))
    res = mtk("convert", str(src), str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 1
    assert "MistralForCausalLM" in res.stderr and "not supported" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
