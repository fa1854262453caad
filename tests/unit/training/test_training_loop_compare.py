"""The CPU loop benchmark's argument construction (``benchmarks/loop_compare.py``, no training): the mtk launch
and Megatron-LM's pretrain_gpt.py command line describe the same model, layout, batch, schedule, optimizer
and loader; and megatron-core's configs built from both differ only in the fields the benchmark explains."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "loop_compare.py"


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _dry_run(tmp_path: Path, *extra: str) -> dict[str, tuple[list[str], list[str]]]:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--work-dir", str(tmp_path), *extra],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    cases, name = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("== "):
            name = line[3:]
        elif line.startswith("mtk: "):
            mtk_cmd = shlex.split(line.removeprefix("mtk: "))
        elif line.startswith("Megatron-LM: "):
            cases[name] = (mtk_cmd, shlex.split(line.removeprefix("Megatron-LM: ")))
    assert not list(tmp_path.glob("mtk-*")), "a dry run must not start a run"
    return cases


def _job(mtk_cmd: list[str]):
    from mtk.spec import load_job

    assert mtk_cmd[1:4] == ["-m", "mtk", "launch"] and _flag(mtk_cmd, "--backend") == "local"
    sets = [mtk_cmd[i + 1] for i, a in enumerate(mtk_cmd) if a == "--set"]
    return load_job(mtk_cmd[4], sets)


def test_dry_run_builds_matching_mtk_launch_and_pretrain_gpt_commands(tmp_path):
    cases = _dry_run(tmp_path, "--iters", "15", "--warmup", "4", "--num-workers", "1")
    assert sorted(cases) == ["gpt-dp2", "gpt-tp2", "llama-dp2", "llama-tp2"]
    for name, (mtk_cmd, meg) in cases.items():
        job = _job(mtk_cmd)
        m, t, p = job.model, job.train, job.parallel
        assert "pretrain_gpt.py" in meg and "--nproc-per-node=2" in meg and job.cluster.procs_per_node == 2
        assert any(a.startswith("PYTHONPATH=") and a.endswith("megatron_lm_cpu") for a in meg)
        assert (_flag(meg, "--num-layers"), _flag(meg, "--hidden-size"), _flag(meg, "--ffn-hidden-size"),
                _flag(meg, "--num-attention-heads"), _flag(meg, "--seq-length"), _flag(meg, "--vocab-size")) == \
            tuple(str(v) for v in (m.num_layers, m.hidden_size, m.ffn, m.num_attention_heads, m.seq_length,
                                   m.vocab_size))
        assert int(_flag(meg, "--tensor-model-parallel-size")) == p.tp == (2 if name.endswith("tp2") else 1)
        assert (t.micro_batch_size, t.global_batch_size, t.iterations) == (2, 8, 15)
        assert (_flag(meg, "--micro-batch-size"), _flag(meg, "--global-batch-size"), _flag(meg, "--train-iters")) \
            == ("2", "8", "15")
        assert t.precision == "fp32" and "--bf16" not in meg and "--fp16" not in meg
        assert float(_flag(meg, "--lr")) == t.lr and float(_flag(meg, "--min-lr")) == t.min_lr
        assert _flag(meg, "--lr-decay-style") == t.lr_decay_style
        assert int(_flag(meg, "--lr-warmup-iters")) == t.lr_warmup_iters
        assert float(_flag(meg, "--clip-grad")) == t.clip_grad and float(_flag(meg, "--weight-decay")) == t.weight_decay
        assert int(_flag(meg, "--num-workers")) == job.data.num_workers == 1
        assert ("--manual-gc" in meg) == t.manual_gc
        assert "--no-create-attention-mask-in-dataloader" in meg and "--mock-data" in meg
        assert not {"--save", "--load", "--save-interval"} & set(meg)  # no checkpointing on either side
        assert t.checkpoint.save_interval is None and not t.checkpoint.save_on_exit and not t.checkpoint.load
        assert t.eval_interval is None and _flag(meg, "--eval-iters") == "0"
        assert t.log_interval == 1 and _flag(meg, "--log-interval") == "1"
        llama = name.startswith("llama")
        assert (m.position_embedding, m.normalization, m.activation) == \
            (("rope", "RMSNorm", "swiglu") if llama else ("learned_absolute", "LayerNorm", "gelu"))
        assert (_flag(meg, "--position-embedding-type"), _flag(meg, "--normalization")) == \
            (m.position_embedding, m.normalization)
        assert ("--swiglu" in meg, "--untie-embeddings-and-output-weights" in meg, "--disable-bias-linear" in meg) \
            == (llama, llama, llama) == (m.activation == "swiglu", m.untie_embeddings, not m.add_bias_linear)
        if llama:
            assert m.query_groups == 2 < m.num_attention_heads and _flag(meg, "--num-query-groups") == "2"
        else:
            assert "--group-query-attention" not in meg


def test_dry_run_refuses_unknown_model_and_short_runs(tmp_path):
    for extra, words in ((["--models", "gpt,mamba"], "--models: unknown mamba"),
                         (["--iters", "6", "--warmup", "5"], "--iters (6) must exceed --warmup (5)")):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--work-dir", str(tmp_path), *extra],
                              capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 2 and words in proc.stderr


@pytest.mark.megatron  # the child imports megatron.training and builds both sides' configs
def test_configs_from_both_commands_differ_only_where_explained(tmp_path):
    """megatron-core's TransformerConfig/DDP/optimizer configs and LR schedule, from mtk's engine and from
    Megatron-LM's own argument code over the benchmark's argv: every differing field is one the benchmark
    explains as unable to change a training step."""
    saved = list(sys.path)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import loop_compare as lc
    finally:
        sys.path[:] = saved  # the script puts benchmarks/ and tests/ first; leave this process's path as it was
    cases = []
    for model in lc.MODELS:
        for layout in lc.LAYOUTS:
            case = lc.Case(model, layout, 20, 2, tmp_path)
            job = lc.load_case_job(case)
            cases.append((case, job, lc.megatron_argv(case, job)))
    # and the check is real: a setting left at Megatron-LM's default (no --manual-gc) shows up, unexplained
    _case, job, argv = cases[0]
    i = argv.index("--manual-gc")
    negative = (SimpleNamespace(name="without-manual-gc"), job, argv[:i] + argv[i + 3:])
    assert not lc.check_settings([*cases, negative], tmp_path)  # one child process for all five
    diffs = json.loads((tmp_path / "settings_diff.json").read_text())
    assert sorted(diffs) == ["gpt-dp2", "gpt-tp2", "llama-dp2", "llama-tp2", "without-manual-gc"]
    for name in ("gpt-dp2", "gpt-tp2", "llama-dp2", "llama-tp2"):
        assert set(diffs[name]) <= set(lc.EXPLAINED), name
        assert not any(k.startswith("loop.") for k in diffs[name])  # batch, workers, GC, seed, NaN check agree
    assert set(diffs["without-manual-gc"]) - set(lc.EXPLAINED) == {"loop.manual_gc"}
    assert diffs["without-manual-gc"]["loop.manual_gc"] == [True, False]
