"""`mtk validate` reports, with the field to change, every refusal megatron-core (or the engine's preflight)
would make at model build — before anything is submitted. Cases the spec checks catch first never reach
megatron-core; the others are found by building megatron-core's own TransformerConfig, LR scheduler and the
GPTModel on the meta device (a child process, fake process groups of the job's world size)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from mtk.launcher.cli import cli

pytestmark = pytest.mark.integration

TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")

# (case, --set overrides on examples/tiny.yaml (cpu, 2 ranks, tp=2, 2 layers, hidden 64, 4 heads),
#  the field the error must name, who refuses: "spec" (mtk's own checks) or "megatron" (megatron-core / engine))
CASES = [
    ("moe-etp-bias", ["model.moe.num_experts=2"], "model.add_bias_linear", "megatron"),
    ("cp-without-te", ["parallel.tp=1", "parallel.cp=2"], "parallel.cp", "megatron"),
    ("lr-warmup-past-horizon", ["train.iterations=3"], "train.lr_warmup_iters", "spec"),  # mtk checks it first now
    ("ffn-not-divisible-by-tp", ["model.ffn_hidden_size=255"], "model.ffn_hidden_size", "megatron"),
    ("sp-without-tp", ["parallel.tp=1", "parallel.sequence_parallel=true"], "parallel.sequence_parallel", "spec"),
    ("heads-by-tp", ["model.num_attention_heads=3", "model.hidden_size=48"], "model.num_attention_heads", "spec"),
    ("gqa-groups-by-tp", ["model.num_query_groups=1"], "model.num_query_groups", "spec"),
    ("pp-layers", ["parallel.tp=1", "parallel.pp=2", "model.num_layers=3"], "model.num_layers", "spec"),
    ("virtual-pp-layers", ["parallel.tp=1", "parallel.pp=2", "parallel.virtual_pp=2", "model.num_layers=2"],
     "model.num_layers", "spec"),
    ("virtual-pp-without-pp", ["parallel.tp=1", "cluster.procs_per_node=1", "parallel.virtual_pp=2",
                               "model.num_layers=4"], "parallel.virtual_pp", "spec"),
    ("fp8-without-te", ["train.precision=fp8"], "train.precision", "spec"),
    ("moe-topk-over-experts", ["model.moe.num_experts=2", "model.moe.router_topk=4", "model.add_bias_linear=false"],
     "model.moe.router_topk", "spec"),
    ("moe-bias-at-ep1-tp1", ["parallel.tp=1", "model.moe.num_experts=2"], "model.add_bias_linear", "spec"),
    ("experts-by-ep", ["parallel.tp=1", "parallel.ep=2", "model.moe.num_experts=3", "model.add_bias_linear=false"],
     "model.moe.num_experts", "spec"),
]


def _validate(*sets: str):
    args = ["validate", TINY, "-q"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize(("sets", "field", "by"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_is_reported_with_its_field(sets, field, by):
    result = _validate(*sets)
    assert result.exit_code == 2, result.output
    assert re.search(rf"^  - {re.escape(field)}\b", result.output, re.M), result.output
    assert ("megatron-core" in result.output or "Transformer Engine" in result.output) == (by == "megatron")


def test_the_base_job_is_accepted_so_each_refusal_is_its_cases_doing():
    """Every case above starts from examples/tiny.yaml: megatron-core accepts it unchanged, so a refusal comes
    from the case's own overrides."""
    result = _validate()
    assert result.exit_code == 0, result.output
    assert "megatron-core: config and model build accepted" in result.output


def test_accepted_job_gets_its_per_rank_size_from_the_meta_model():
    """MoE at EP=2: the non-expert weights are on every rank, so a rank holds more than total / EP (the old
    estimate) and less than the total."""
    result = _validate("parallel.tp=1", "parallel.ep=2", "model.moe.num_experts=4", "model.add_bias_linear=false")
    assert result.exit_code == 0, result.output
    total = int(re.search(r"^parameters: .*\(([\d,]+)\)", result.output, re.M).group(1).replace(",", ""))
    per_rank = re.search(r"^parameters per GPU: +[\d.]+[KMB]? \(([\d,]+), rank 0, from the megatron-core's meta-device",
                         result.output, re.M)
    assert per_rank, result.output
    value = int(per_rank.group(1).replace(",", ""))
    assert total / 2 < value < total
    assert "megatron-core: config and model build accepted" in result.output
