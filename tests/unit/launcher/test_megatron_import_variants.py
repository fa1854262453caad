"""The attention and activation variants megatron-core has and mtk's spec does not (yet) — core_r0.19.0's gpt-oss
training example gives them all — are refused by name, each saying what it is, the megatron-core setting it would
reach (checked against megatron-core's own TransformerConfig, so a renamed field is caught) and why mtk does not
honour it. None is ever accepted silently: the import exits 2 unless --allow-dropped names it."""

from __future__ import annotations

import dataclasses
import re

import pytest
from mtk.launcher.cli import main
from mtk.launcher.megatron_import import import_text
from mtk.launcher.megatron_import.flag_classes import NOT_HONOURED

# in the order and spelling of core_r0.19.0's examples/gptoss/02_train.sh
VARIANTS = ("--quick-geglu", "--glu-linear-offset 1.0", "--softmax-type learnable", "--window-attn-skip-freq 2",
            "--activation-func-clamp-value 7.0", "--window-size 127,0", "--enable-gpt-oss")
GPT = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 " \
      "--seq-length 64 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-3 --mock-data " \
      "--tokenizer-type NullTokenizer --vocab-size 1000 {variants}\n"


def _transformer_config_fields() -> set[str]:
    from mtk.training import compat

    compat.install()
    from megatron.core.transformer.transformer_config import TransformerConfig

    return {f.name for f in dataclasses.fields(TransformerConfig)}


def test_each_variant_is_refused_naming_what_it_is_and_why_not():
    result = import_text(GPT.format(variants=" ".join(VARIANTS)))
    refused = dict(result.refused)
    assert list(refused) == [v.split()[0] for v in VARIANTS]
    assert not {v.split()[0] for v in VARIANTS} & set(result.honoured)
    fields = _transformer_config_fields()
    for flag, why in refused.items():
        assert NOT_HONOURED in why, flag
        for field in re.findall(r"TransformerConfig\.([a-z_]+)", why):
            assert field in fields, (flag, field)  # the setting named is megatron-core's own
    assert refused["--window-size"].startswith("sliding-window attention (megatron-core's TransformerConfig.window")
    assert "softmax_offset" in refused["--softmax-type"] and "model.activation is gelu or swiglu" in \
        refused["--quick-geglu"]
    assert "YaRN" in refused["--enable-gpt-oss"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_variant_stops_the_import_unless_allowed_to_be_dropped(variant, tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text(GPT.format(variants=variant))
    out = tmp_path / "spec.yaml"
    flag = variant.split()[0]
    assert main(["import", str(script), "-o", str(out)]) == 2 and not out.exists()
    assert flag in capsys.readouterr().err
    assert main(["import", str(script), "-o", str(out), "--allow-dropped", flag]) == 0
    assert f"#   {flag}: " in out.read_text()


def test_no_flag_with_a_table_row_is_also_worded_as_ignored_or_refused():
    """classify asks the table first, so a flag that gained a row and still sits in HARMLESS or CHANGES is a dead
    entry whose wording no user sees and the next reader takes for the truth."""
    from mtk.launcher.megatron_import import flag_classes

    from mtk import megatron_flags

    rows = {row.flag for row in megatron_flags.FLAGS}
    assert sorted(rows & {*flag_classes.HARMLESS, *flag_classes.CHANGES}) == []
