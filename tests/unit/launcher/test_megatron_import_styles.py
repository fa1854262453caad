"""``mtk import`` on scripts written in each style Megatron-LM core_r0.19.0's examples use (tests/fixtures/
megatron_import: positional arguments, double-quoted strings continued with backslashes, conditions on the
environment, an option-parsing loop, a here-document submitted to sbatch, a sourced file): the spec trains what the
script trains, or the import exits 2 naming the flag or line. Never exit 0 with another model, batch, schedule or
precision. The corpus itself: scripts/megatron_import_corpus.py, its result in docs/megatron-import.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from mtk.launcher.cli import main
from mtk.launcher.megatron_import import import_text
from mtk.launcher.megatron_import.entry import NotGpt
from mtk.launcher.megatron_import.flag_classes import classify
from mtk.launcher.megatron_import.verdict import judge

from mtk import megatron_flags
from mtk.spec.loader import validate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_import"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_positional_arguments_are_asked_for_and_a_warmup_fraction_is_mapped_exactly():
    result = import_text(_text("positional_args.sh"), source="positional_args.sh")
    refused = dict(result.refused)
    assert list(refused) == ["--data-path", "--vocab-file", "--merge-file"]
    assert refused["--data-path"] == ("its value '$5' is not known: $5 (line 15) is the script's argument 5: pass the "
                                      "script's arguments after it (mtk import SCRIPT ARG...)")
    ignored = dict(result.ignored)  # paths mtk sets itself: their unknown values are not needed
    assert {"--save", "--load", "--tensorboard-dir"} <= set(ignored)
    paths = ["/ck", "/tb", "/data/gpt2-vocab.json", "/data/gpt2-merges.txt", "/data/web_text_document"]
    given = import_text(_text("positional_args.sh"), source="positional_args.sh", args=paths)
    assert given.refused == [] and "--lr-warmup-fraction" in given.honoured
    spec = given.spec
    assert spec["data"]["blend"] == [{"prefix": "web_text_document"}] and spec["data"]["dir"] == "/data"
    assert spec["train"]["checkpoint"]["dir"] == "/ck" and spec["cluster"]["nodes"] == 2
    assert (spec["train"]["global_batch_size"], spec["train"]["precision"]) == (64, "bf16")
    # --lr-warmup-fraction .01 --lr-decay-iters 18000: the fraction itself, no warmup in iterations beside it, and
    # megatron-core's scheduler warms up for .01 x the decay horizon in samples, as Megatron-LM computes it
    assert (spec["train"]["lr_warmup_fraction"], spec["train"]["lr_decay_iters"]) == (0.01, 18000)
    assert "lr_warmup_iters" not in spec["train"]
    schedule = megatron_flags.core_kwargs(validate(spec), megatron_flags.SCHEDULER)
    assert (schedule["lr_warmup_steps"], schedule["lr_decay_steps"]) == (0.01 * 18000 * 64, 18000 * 64)


def test_the_scripts_arguments_and_allow_dropped_through_the_verb(tmp_path, capsys):
    out = tmp_path / "gpt.yaml"
    script = tmp_path / "fsdp.sh"  # the example with a flag mtk cannot honour: Megatron-FSDP
    script.write_text(_text("positional_args.sh").replace("    --lr-warmup-fraction .01\n",
                                                          "    --lr-warmup-fraction .01\n    --use-megatron-fsdp\n"))
    args = ["import", str(script), "-o", str(out)]
    paths = ["--", "/ck", "/tb", "/data/gpt2-vocab.json", "/data/gpt2-merges.txt", "/data/web_text_document"]
    assert main([*args, *paths]) == 2 and not out.exists()
    assert "--allow-dropped --use-megatron-fsdp" in capsys.readouterr().err
    assert main([*args, "--allow-dropped", "--use-megatron-fsdp", *paths]) == 0
    lines = out.read_text().splitlines()
    assert lines[1] == "# DROPPED with --allow-dropped (1): each changes what the script trains, and this spec does " \
                       "not do it:"
    assert lines[2].startswith("#   --use-megatron-fsdp: Megatron-FSDP shards parameters")
    assert validate(yaml.safe_load(out.read_text())).train.lr_warmup_fraction == 0.01
    unchanged = tmp_path / "unchanged.yaml"  # the example itself: every flag honoured, nothing to allow
    assert main(["import", str(FIXTURES / "positional_args.sh"), "-o", str(unchanged), *paths]) == 0
    assert "DROPPED" not in unchanged.read_text()


def test_backslash_newline_inside_double_quotes_keeps_every_flag():
    """A 12-line GPT script in t5's style: bash drops backslash-newline inside "..."; the case picks the size."""
    result = import_text(_text("quoted_strings.sh"), source="quoted_strings.sh")
    assert result.refused == []
    model, train = result.spec["model"], result.spec["train"]
    assert (model["num_layers"], model["hidden_size"], model["num_attention_heads"], model["ffn_hidden_size"]) == \
        (8, 512, 8, 2048)
    assert (train["global_batch_size"], train["micro_batch_size"], train["precision"], train["lr_warmup_iters"]) == \
        (32, 4, "bf16", 1000)
    assert result.spec["data"]["split"] == "99982,9,9" and result.spec["cluster"]["procs_per_node"] == 8
    validate(result.spec)


def test_options_the_environment_may_add_are_read_every_way():
    result = import_text(_text("conditional_options.sh"), source="conditional_options.sh")
    assert result.refused == []
    ignored = dict(result.ignored)
    assert ignored["--wandb-project"] == ("differs between the ways the script can go (moe / absent), depending on "
                                          "`[ -n \"${WANDB_API_KEY}\" ]` (line 76)")
    assert any("USE_MEGATRON_FSDP is not set in the script; its default '0' was used" in n for n in result.notes)
    spec = result.spec
    assert spec["model"]["moe"] == {"num_experts": 8, "router_topk": 2, "aux_loss_coeff": 0.01}
    assert spec["parallel"] == {"tp": 2, "pp": 2, "ep": 2, "distributed_optimizer": True, "sequence_parallel": True}
    validate(spec)
    fsdp = _text("conditional_options.sh").replace("${USE_MEGATRON_FSDP:-0}", "${USE_MEGATRON_FSDP:-1}")
    refused = dict(import_text(fsdp, source="fsdp.sh").refused)
    assert refused["--use-megatron-fsdp"].startswith("Megatron-FSDP shards parameters and gradients")
    assert "--data-parallel-sharding-strategy" in refused


def test_an_option_loop_and_attention_and_activation_variants():
    result = import_text(_text("option_loop.sh"), source="option_loop.sh")
    refused = dict(result.refused)
    assert list(refused) == ["--quick-geglu", "--softmax-type", "--window-size"]
    assert "--lr-warmup-fraction" in result.honoured and result.spec["train"]["lr_warmup_fraction"] == 0.05
    assert refused["--window-size"].startswith("sliding-window attention")
    assert result.spec["data"]["tokenizer"] == {"type": "NullTokenizer"}  # no arguments: the loop does not run
    real = import_text(_text("option_loop.sh"), source="option_loop.sh", args=["--tokenizer", "/tok"])
    assert real.spec["data"]["tokenizer"] == {"type": "HuggingFaceTokenizer", "model": "/tok/tokenizer.json"}
    sourced = import_text(_text("option_loop.sh"), source="option_loop.sh", args=["--config-file", "c.sh"])
    # what the sourced file may set ($TOKENIZER_ARG) decides the data: each way's data flags are refused
    assert dict(sourced.refused)["--tokenizer-type"].endswith("depending on `[[ \"$TOKENIZER_ARG\" == \"MOCK\" ]] || "
                                                              "[[ -z \"$TOKENIZER_ARG\" ]]` (line 52)")


def test_a_here_document_submitted_to_sbatch_is_read_with_its_batch_options():
    verdict = judge(_text("sbatch_heredoc.sh"), "sbatch_heredoc.sh")
    result = verdict.imported
    assert verdict.ok and result.refused == []
    assert result.entry == "/opt/Megatron-LM/pretrain_gpt.py"
    spec = result.spec
    assert spec["name"] == "gqa-2b"
    assert spec["cluster"] == {"device": "gpu", "nodes": 4, "procs_per_node": 8, "slurm": {
        "container_image": "/fsx/images/megatron.sqsh", "container_workdir": "/opt/Megatron-LM", "partition": "train",
        "exclusive": True, "runtime": "pyxis"}}
    assert spec["parallel"]["tp"] == 2 and spec["train"]["checkpoint"]["dir"] == "/fsx/runs/gqa/checkpoints"


def test_a_sourced_file_makes_what_follows_it_unknown():
    refused = dict(import_text(_text("sourced_config.sh"), source="sourced_config.sh").refused)
    assert refused["${MEGATRON_PARAMS}"].startswith("not known, so it may hold any flags: ${MEGATRON_PARAMS} (line 7) "
                                                    "may be set by `. `pwd`/CONFIG.sh` (line 5)")
    assert refused["--micro-batch-size"].endswith("may be set by `. `pwd`/CONFIG.sh` (line 5)")


GPT = "torchrun --nproc_per_node 8 {entry} --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 " \
      "--micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-3\n"
OTHERS = {"pretrain_bert.py": "BERT", "pretrain_t5.py": "T5", "../../pretrain_hybrid.py": "a hybrid Mamba/attention",
          "pretrain_mamba.py": "a Mamba state-space model", "pretrain_vlm.py": "a vision-language model",
          "examples/multimodal/train.py": "a multimodal (vision-language) model",
          "examples/mimo/train.py": "a multimodal (MIMO) model", "pretrain_retro.py": "RETRO",
          "train_rl.py": "a policy by reinforcement learning"}


@pytest.mark.parametrize("entry", sorted(OTHERS))
def test_another_entry_point_is_refused_naming_it_and_what_mtk_trains(entry):
    with pytest.raises(NotGpt) as caught:
        import_text(GPT.format(entry=entry), source="train.sh")
    message = str(caught.value)
    assert message.startswith(f"train.sh: line 1: {entry.rsplit('/', 1)[-1]} trains {OTHERS[entry]}")
    assert "mtk trains megatron-core's GPTModel, as Megatron-LM's pretrain_gpt.py does" in message


def test_pretrain_gpt_imports_wherever_it_lives():
    for entry in ("pretrain_gpt.py", "/opt/Megatron-LM/pretrain_gpt.py", "${MEGATRON}/pretrain_gpt.py"):
        assert judge(GPT.format(entry=entry), "train.sh").ok, entry


def test_what_only_running_could_tell_reaches_a_flag_and_is_refused(tmp_path, capsys):
    """The issue's case: a backquoted command read as words made the `;` inside it end the command (exit 0 with
    the global batch, precision, lr and iterations of mtk's defaults)."""
    script = tmp_path / "train.sh"
    script.write_text("torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                      "--seq-length 64 \\\n  --micro-batch-size `echo 4; true` --global-batch-size 64 --lr 3e-4 "
                      "--train-iters 1000 --bf16\n")
    assert main(["import", str(script)]) == 2
    err = capsys.readouterr().err
    assert "  --micro-batch-size: its value '`echo 4; true`' is not known: `echo 4; true` (line 2): only running the " \
           "script can tell its output" in err
    assert len(err.splitlines()) == 2 and err.splitlines()[-1].startswith(f"error: {script}: 1 of its settings")
    seq = dict(import_text("X=`echo 4`\npretrain_gpt.py --seq-length $X\n").refused)["--seq-length"]
    assert "only running the script can tell its output" in seq
    unused = import_text('mkdir -p "$(dirname "$CKPT")"\n' + GPT.format(entry="pretrain_gpt.py"))
    assert unused.refused == []  # a substitution no flag reads does not matter


def test_every_flag_has_a_class_and_the_table_is_asked_first(monkeypatch):
    assert classify("--num-layers").kind == "honoured"
    assert classify("--log-throughput").kind == classify("--profile").kind == classify("--wandb-project").kind == \
        "ignored"
    assert classify("--window-size").kind == classify("--made-up-flag").kind == "changes"
    assert classify("--made-up-flag").why.startswith("unknown to mtk")
    # another engineer adds table rows for these: the import honours them with no change here
    rows = (megatron_flags.Flag("--lr-warmup-fraction", "train.lr_warmup_fraction"),
            megatron_flags.Flag("--window-size", "model.window_size"))
    monkeypatch.setattr(megatron_flags, "FLAGS", megatron_flags.FLAGS + rows)
    result = import_text(GPT.format(entry="pretrain_gpt.py").strip() + " --lr-warmup-fraction 0.01 --window-size 128\n")
    assert result.refused == [] and {"--lr-warmup-fraction", "--window-size"} <= set(result.honoured)
    assert result.spec["train"]["lr_warmup_fraction"] == 0.01 and result.spec["model"]["window_size"] == 128


def test_a_value_mtk_fixes_is_honoured_ignored_or_refused_by_what_it_changes():
    def fate(extra: str) -> tuple[str, str]:
        verdict = judge(GPT.format(entry="pretrain_gpt.py").strip() + f" {extra}\n", "t.sh")
        found = dict(verdict.imported.ignored) | dict(verdict.imported.refused)
        flag = extra.split()[0]
        return ("refused" if flag in dict(verdict.imported.refused) else "ignored"), found[flag]

    assert fate("--optimizer adam") == ("ignored", "set by mtk itself: always (the same adam)")
    assert fate("--optimizer sgd")[0] == "refused"
    assert fate("--rotary-percent 0.5")[0] == "refused"
    assert fate("--kv-channels 16")[0] == "ignored"  # hidden 64 / 4 heads: what the spec trains
    assert fate("--kv-channels 32") == ("refused", "the script's 32 differs from what the spec trains (16: "
                                                   "hidden_size ÷ num_attention_heads)")


def test_show_args_prints_what_the_script_passes_in_the_args_files_form(capsys):
    assert main(["import", str(FIXTURES / "quoted_strings.sh"), "--show-args"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("MEGATRON_LM_ARGS=(\n  --num-layers 8\n  --hidden-size 512\n") and out.endswith(")\n")
    assert "  --ffn-hidden-size 2048\n" in out and "  --data-path /datasets/pile_text_document\n" in out


def test_flags_megatron_lm_reads_together_are_judged_together():
    base = GPT.format(entry="pretrain_gpt.py").strip()
    mock = dict(import_text(f"{base} --mock-data --data-path /d/web_text_document\n").refused)
    assert mock == {"--data-path": "given with --mock-data, under which Megatron-LM trains on mock data and never "
                                   "reads it; keep one of the two"}
    both = dict(import_text(f"{base} --fp16 --bf16\n").refused)
    assert both == {"--fp16": "given with --bf16: Megatron-LM stops at the two together"}
    samples = dict(import_text(f"{base} --train-samples 1.5e9\n").refused)
    assert samples["--train-samples"] == "'1.5e9' is not a whole number: Megatron-LM reads --train-samples with " \
                                         "int() and stops at it (line 1)"
    units = dict(import_text(f"{base} --train-samples 80\n").refused)
    assert units["--train-samples"] == "given with --train-iters: Megatron-LM counts in iterations or in samples, " \
                                       "and stops at both"


def test_a_whole_number_flag_takes_what_megatron_lms_int_takes(tmp_path, capsys):
    """Megatron-LM reads --train-iters with argparse's type=int: '1e3' stops it (it was imported as 1000), '1_000'
    is 1000. The import exits 2 naming the flag and the value."""
    script = tmp_path / "iters.sh"
    script.write_text(GPT.format(entry="pretrain_gpt.py").replace("--train-iters 10", "--train-iters 1e3"))
    assert main(["import", str(script), "-o", str(tmp_path / "out.yaml")]) == 2
    assert "--train-iters: '1e3' is not a whole number: Megatron-LM reads --train-iters with int() and stops at it " \
           "(line 1)" in capsys.readouterr().err
    assert not (tmp_path / "out.yaml").exists()
    same = import_text(GPT.format(entry="pretrain_gpt.py").replace("--train-iters 10", "--train-iters 1_000") +
                       "\n").spec["train"]["iterations"]
    assert same == 1000 and type(same) is int
    refused = dict(import_text(GPT.format(entry="pretrain_gpt.py").strip() + " --rotary-base 1e4 --position-embedding"
                                                                              "-type rope --num-layers 2.0\n").refused)
    assert set(refused) == {"--rotary-base", "--num-layers"}  # rotary_base is any number in the spec, not to Megatron


def test_no_refusal_says_depending_on_nothing():
    """Two training commands with no condition between them: both run, so no 'depending on' with nothing after it
    (it said 'the ways the script can go (1e-3 / 2e-3), depending on ')."""
    first, second = GPT.format(entry="pretrain_gpt.py"), GPT.format(entry="pretrain_gpt.py").replace("1e-3", "2e-3")
    result = import_text(first + second.replace("torchrun", "srun"))
    assert dict(result.refused) == {"--lr": "differs between the training commands the script runs one after another "
                                            "(lines 1, 2) (1e-3 / 2e-3), each a run of its own (a spec is one run: "
                                            "import a script with one of them)"}
    assert result.notes == ["the launcher differs between the training commands the script runs one after another "
                            "(lines 1, 2): the cluster's counts are not read from it"]
    with pytest.raises(NotGpt) as caught:
        import_text(GPT.format(entry="pretrain_bert.py") + first)
    assert str(caught.value).endswith("so only a pretrain_gpt.py command imports; it runs pretrain_gpt.py too (line 2)")
    conditional = import_text(f'if [ "$X" = 1 ]; then\n{first}else\n{second}fi\n')
    assert dict(conditional.refused)["--lr"].endswith('depending on `[ "$X" = 1 ]` (line 1)')
    said = [why for r in (result, conditional) for _, why in [*r.refused, *r.ignored]] + result.notes
    assert not [s for s in said if re.search(r"depending on\s*($|[;,.)])", s)]


def test_the_process_group_timeout_is_read_back_into_its_field():
    """--distributed-timeout-minutes is a row mtk derives from cluster.pg_timeout_s: the script's 60 minutes is that
    field's 3,600 s, so the spec trains with the script's timeout (it was refused as differing from the default 10)."""
    verdict = judge(GPT.format(entry="pretrain_gpt.py").strip() + " --distributed-timeout-minutes 60\n", "t.sh")
    assert verdict.ok and verdict.imported.refused == []
    assert "--distributed-timeout-minutes" in verdict.imported.honoured
    assert verdict.imported.spec["cluster"] == {"device": "gpu", "procs_per_node": 8, "pg_timeout_s": 3600}
    spelled = judge(GPT.format(entry="pretrain_gpt.py").strip() + " --distributed-timeout-minutes 6e1\n", "t.sh")
    assert dict(spelled.imported.refused)["--distributed-timeout-minutes"].startswith("the script's 6e1 differs")
