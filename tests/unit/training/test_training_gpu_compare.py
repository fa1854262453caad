"""The GPU benchmark's argument construction (``benchmarks/gpu_megatron_compare.py --dry-run``, no GPU):
mtk's job and Megatron-LM's command line describe the same model, batch and precision."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_dry_run_builds_matching_mtk_job_and_megatron_command(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_megatron_compare.py"),
                           "--megatron-lm", str(tmp_path / "mlm"), "--dry-run", "--work-dir", str(tmp_path),
                           "--model", "1.3b", "--micro-batch", "3", "--iters", "20", "--warmup", "5"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    meg = shlex.split(next(ln for ln in lines if ln.startswith("Megatron-LM: ")).removeprefix("Megatron-LM: "))
    assert meg[0] == f"PYTHONPATH={tmp_path / 'mlm'}" and str(tmp_path / "mlm" / "pretrain_gpt.py") in meg
    assert _flag(meg, "--transformer-impl") == "local" and "--bf16" in meg and "--mock-data" in meg
    job = json.loads((tmp_path / "mtk-1.3b" / "job.json").read_text())
    m, t = job["model"], job["train"]
    assert (m["num_layers"], m["hidden_size"], m["num_attention_heads"], m["seq_length"]) == (24, 2048, 16, 2048)
    assert (_flag(meg, "--num-layers"), _flag(meg, "--hidden-size"), _flag(meg, "--num-attention-heads"),
            _flag(meg, "--seq-length")) == ("24", "2048", "16", "2048")
    assert (t["micro_batch_size"], t["global_batch_size"]) == (3, 24)
    assert (_flag(meg, "--micro-batch-size"), _flag(meg, "--global-batch-size")) == ("3", "24")
    assert t["precision"] == "bf16" and job["cluster"]["device"] == "gpu"
    assert float(_flag(meg, "--lr")) == t["lr"] and float(_flag(meg, "--weight-decay")) == t["weight_decay"]
    assert _flag(meg, "--vocab-size") == str(m["vocab_size"]) and m["hidden_dropout"] == 0.0
    mtk_cmd = shlex.split(next(ln for ln in lines if ln.startswith("mtk: ")).removeprefix("mtk: "))
    assert mtk_cmd[-4:] == ["--job", str(tmp_path / "mtk-1.3b" / "job.json"), "--run-dir", str(tmp_path / "mtk-1.3b")]
    plan = next(ln for ln in lines if ln.startswith("mtk plan here: "))
    assert ("--grad-reduce-in-bf16" in meg) == ("grad reduce: bf16" in plan)
    assert ("--cross-entropy-loss-fusion" in meg) == ("cross-entropy" in plan.split("fused: ")[1].split(";")[0])
    assert ("--no-gradient-accumulation-fusion" in meg) == ("grad-accum" not in plan)


def test_dry_run_llama_has_the_same_architecture_flags_on_both_sides(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_megatron_compare.py"),
                           "--megatron-lm", str(tmp_path / "mlm"), "--dry-run", "--work-dir", str(tmp_path),
                           "--model", "llama-1b", "--max-micro-batch", "--iters", "20", "--warmup", "8"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    meg = shlex.split(next(ln for ln in lines if ln.startswith("Megatron-LM: ")).removeprefix("Megatron-LM: "))
    m = json.loads((tmp_path / "mtk-llama-1b" / "job.json").read_text())["model"]
    assert (m["position_embedding"], m["normalization"], m["activation"]) == ("rope", "RMSNorm", "swiglu")
    assert (_flag(meg, "--position-embedding-type"), _flag(meg, "--normalization")) == ("rope", "RMSNorm")
    assert "--swiglu" in meg and "--disable-bias-linear" in meg and not m["add_bias_linear"]
    assert int(_flag(meg, "--num-query-groups")) == m["num_query_groups"] == 8 < m["num_attention_heads"] == 32
    assert int(_flag(meg, "--ffn-hidden-size")) == m["ffn_hidden_size"] == 8192
    assert int(_flag(meg, "--rotary-base")) == m["rotary_base"] == 500000
    assert int(_flag(meg, "--vocab-size")) == m["vocab_size"] == 128256 and int(_flag(meg, "--seq-length")) == 4096
    assert "--untie-embeddings-and-output-weights" not in meg and not m["untie_embeddings"]
    plan = next(ln for ln in lines if ln.startswith("mtk plan here: "))
    assert "attention: torch SDPA" in plan and "Adam: torch fused" in plan  # a GPU without TE
    only = json.loads((tmp_path / "mtk-llama-1b-mb2" / "job.json").read_text())["train"]
    assert (only["micro_batch_size"], only["global_batch_size"]) == (2, 8)
