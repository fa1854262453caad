"""``mtk import``: Megatron-LM launch scripts in the shapes users have (bash arrays with torchrun, sbatch with srun
and ``python -m torch.distributed.run``, continuation lines) become specs that validate; every flag lands in its
field, is ignored with why (it does not change what trains) or is refused by name (it does); and spec →
megatron_lm_args.txt → import gives the same spec back for every example and every preset. The styles of Megatron-LM's
own examples: test_megatron_import_styles.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mtk.launcher.cli import main
from mtk.launcher.megatron_import import import_text
from mtk.training.interop import megatron_lm

from mtk.checkpoint_paths import default_dir
from mtk.megatron_flags import FLAGS
from mtk.spec.loader import load_job, read_yaml, validate
from mtk.spec.presets import PRESETS
from mtk.vocabulary import padded_vocab

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "megatron_import"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _listed(result) -> dict[str, str]:
    return dict(result.not_imported)


def _refused(result) -> dict[str, str]:
    return dict(result.refused)


def test_bash_arrays_with_torchrun():
    result = import_text((FIXTURES / "arrays_torchrun.sh").read_text(), source="arrays_torchrun.sh")
    spec = result.spec
    assert spec["name"] == "arrays-torchrun"
    assert spec["cluster"] == {"device": "gpu", "nodes": 2, "procs_per_node": 4}
    model = spec["model"]
    assert (model["num_layers"], model["hidden_size"], model["ffn_hidden_size"], model["num_query_groups"]) == \
        (16, 2048, 5632, 4)
    assert (model["position_embedding"], model["activation"], model["normalization"], model["arch"]) == \
        ("rope", "swiglu", "RMSNorm", "llama")
    assert model["add_bias_linear"] is False and model["untie_embeddings"] is True and model["rotary_base"] == 500000
    train = spec["train"]
    assert train["global_batch_size"] == 64  # $((WORLD * 8)) with WORLD=$(($GPUS*$NODES))
    assert (train["precision"], train["grad_reduce_dtype"], train["recompute"]) == ("bf16", "bf16", "selective")
    assert train["checkpoint"] == {"save_interval": 250, "dir": "/lustre/ckpt/gqa-1b"}  # "$1" unset: its default
    assert (train["eval_interval"], train["eval_iters"], train["log_interval"]) == (500, 5, 10)
    assert spec["parallel"] == {"tp": 2, "sequence_parallel": True, "distributed_optimizer": True}
    # the if took the mock branch ($2 defaults to MOCK); the quoted "--split '98,2,0'" element is read without quotes
    assert spec["data"] == {"tokenizer": {"type": "NullTokenizer"}, "split": "98,2,0"} and model["vocab_size"] == 32000
    assert result.refused == []
    ignored = dict(result.ignored)
    assert ignored["--exit-duration-in-mins"].startswith("fault tolerance and time limits")
    assert ignored["--wandb-project"].startswith("logging")
    assert ignored["--overlap-grad-reduce"].startswith("set by mtk itself")
    assert ignored["--mock-data"].startswith("set by mtk itself")
    assert "torchrun --master_addr" in ignored
    assert any("the quotes reach Megatron-LM" in n for n in result.notes)
    assert any("read as true" in n and "the script's argument 2 is not set in the script; its default 'MOCK'" in n
               for n in result.notes)
    validate(spec)


def test_sbatch_srun_torch_distributed_run():
    result = import_text((FIXTURES / "srun_sbatch.sbatch").read_text(), source="srun_sbatch.sbatch")
    spec = result.spec
    assert spec["name"] == "imported-moe"  # #SBATCH --job-name, made a valid name
    cluster = spec["cluster"]
    assert (cluster["nodes"], cluster["procs_per_node"]) == (4, 8)  # #SBATCH --nodes; torchrun's --nproc_per_node
    assert cluster["slurm"] == {"container_image": "/fsx/images/megatron.sqsh", "partition": "p5", "time": "12:00:00",
                                "exclusive": True, "runtime": "pyxis", "hyperpod_auto_resume": True}
    model, train = spec["model"], spec["train"]
    assert model["hidden_size"] == 1024 and model["moe"] == {"num_experts": 8, "router_topk": 2, "aux_loss_coeff": 0.02}
    assert spec["parallel"] == {"ep": 4, "distributed_optimizer": True}
    assert train["checkpoint"] == {"fully_reshardable": True}
    assert (train["iterations"], train["lr_warmup_iters"]) == (10000, 100)  # samples ÷ the global batch of 256
    assert (train["precision"], train["fp8"]["format"]) == ("fp8", "hybrid")
    # flags the command leaves out take Megatron-LM's defaults, not mtk's
    assert (train["fp8"]["amax_history_len"], train["fp8"]["amax_compute_algo"]) == (1, "most_recent")
    assert (train["min_lr"], train["lr_decay_style"], train["weight_decay"], train["adam_beta2"]) == \
        (0.0, "linear", 0.01, 0.999)
    assert (train["recompute"], train["recompute_num_layers"]) == ("full", 2)
    assert spec["data"]["dir"] == "/fsx/corpus/gpt2" and spec["data"]["blend"] == [{"prefix": "web_text_document"}]
    assert spec["data"]["tokenizer"] == {"type": "GPT2BPETokenizer", "vocab_file": "vocab.json",
                                         "merge_file": "merges.txt"}
    # Adam is what mtk trains: the script's SGD would train something else, so the import refuses it by name
    assert _refused(result) == {"--optimizer": "mtk always uses adam; the script's sgd trains differently (line 32)"}
    ignored = dict(result.ignored)
    assert ignored["--tensorboard-dir"].startswith("its value '$TB_DIR' is not known: $TB_DIR (line 57): TB_DIR is not "
                                                   "set in the script")  # a path mtk sets itself: not needed
    assert ignored["torchrun --nnodes"].startswith("'$SLURM_JOB_NUM_NODES' is not known from the script")
    assert "torchrun --rdzv_endpoint" in ignored  # $(hostname) is never run
    assert "--moe-token-dispatcher-type" in ignored and "--recompute-method" in ignored
    validate(spec, backend="slurm")


def test_continued_lines_and_equals_spellings():
    result = import_text((FIXTURES / "continued_lines.txt").read_text(), source="continued_lines.txt")
    spec = result.spec
    assert (spec["model"]["num_layers"], spec["model"]["hidden_size"]) == (4, 256)  # --num-layers=4
    assert spec["data"] == {"tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "gpt2-vocab.json",
                                          "merge_file": "gpt2-merges.txt"},
                            "blend": [{"prefix": "corpus_text_document"}], "split": "969,30,1", "dir": "data"}
    assert result.ignored == [] and [flag for flag, _ in result.refused] == ["--no-such-flag"]
    assert _refused(result)["--no-such-flag"].startswith("unknown to mtk: it may change the model")
    assert spec["train"]["precision"] == "bf16" and spec["cluster"] == {"device": "gpu"}
    validate(spec)


def test_every_flag_given_is_in_the_spec_or_listed():
    """Nothing dropped: each --flag of each fixture is a table row whose field the spec sets, or is listed."""
    import re

    for fixture in FIXTURES.iterdir():
        result = import_text(fixture.read_text(), source=fixture.name)
        listed = {k.split()[-1] for k in _listed(result)}
        code = re.sub(r"(^|\s)#.*$", "", fixture.read_text(), flags=re.M)  # comments and #SBATCH lines
        given = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]+", code))
        launcher = {"--nproc_per_node", "--nnodes", "--container-image", "--auto-resume"}  # cluster.*, cluster.slurm.*
        if not fixture.name.startswith(("arrays_torchrun", "srun_sbatch", "continued_lines")):
            continue  # the example styles: test_megatron_import_styles.py
        untaken = {"--fp16", "--data-path", "--tokenizer-model"} if fixture.name == "arrays_torchrun.sh" else set()
        for flag in given - listed - launcher - untaken:  # untaken: in the if's other branch
            rows = [f for f in FLAGS if f.flag == flag and f.spec]
            assert rows, f"{fixture.name}: {flag} neither imported nor listed"
            node = result.spec
            for part in rows[0].spec.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            assert node is not None or flag in ("--eval-iters", "--load"), f"{fixture.name}: {flag} not in the spec"


def _argv(job) -> list[str]:
    p, vocab = job.parallel, job.model.vocab_size
    padded = padded_vocab(vocab, job.model.make_vocab_size_divisible_by, p.tp)
    args = megatron_lm.megatron_args(job, data_parallel_size=job.cluster.world_size // (p.tp * p.pp * p.cp),
                                     vocab_size=vocab, padded_vocab_size=padded, consumed_train_samples=0, iteration=1)
    return megatron_lm.pretrain_gpt_argv(args, job, job.train.checkpoint.dir or default_dir(job.cluster.runs_dir,
                                                                                          job.name))


CASES = {**{f"example:{p.name}": read_yaml(p) for p in EXAMPLES},
         **{f"preset:{name}": {"name": "preset", "model": {"preset": name},
                               "cluster": {"nodes": 1, "procs_per_node": 8, "device": "gpu"}} for name in PRESETS},
         # a growing batch: the args file counts the run in samples (--train-samples, --lr-*-samples)
         "batch_size_schedule": {"name": "stepped", "model": {"preset": "tiny", "seq_length": 64,
                                                               "max_position_embeddings": 64},
                                 "cluster": {"nodes": 1, "procs_per_node": 8, "device": "gpu"},
                                 "train": {"batch_size_schedule": "0:8 500:16 3200:32", "iterations": 50,
                                           "lr_warmup_iters": 3, "lr_decay_iters": 41}}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_spec_args_file_import(case):
    """spec → megatron_lm_args.txt → import → the same spec: every table field resolves to the same value and the
    args file written from the import is the same file. The args carry no cluster (it is copied), and
    model.vocab_size only with NullTokenizer (another tokenizer brings its own vocabulary)."""
    data = CASES[case]
    job = validate(data)
    text = megatron_lm.args_file_text(_argv(job), 1, job)
    result = import_text(text, name=job.name)
    assert result.refused == [] and [why for _, why in result.ignored if not why.startswith("set by mtk itself")] == []
    spec = {**result.spec, "cluster": data["cluster"]}
    again = validate(spec)
    assert _argv(again) == _argv(job)
    for flag in FLAGS:
        if not flag.spec or flag.spec.startswith("data.") or flag.written == "" or flag.engine or \
                flag.flag in ("--save", "--load"):
            continue  # paths, and what the device plan resolves, are compared resolved in the argv above
        if flag.spec == "model.vocab_size" and job.data.tokenizer.type != "NullTokenizer":
            continue
        assert flag.value(again) == flag.value(job), (case, flag.flag)
    dump = lambda j: j.model.model_dump(exclude={"preset", "num_query_groups", "vocab_size"})  # noqa: E731
    assert dump(again) == dump(job) and again.model.query_groups == job.model.query_groups
    assert again.parallel == job.parallel


def test_the_verb_writes_a_spec_that_validates(tmp_path, capsys):
    out = tmp_path / "imported.yaml"
    # the script trains with SGD, which mtk does not: nothing is written until the user allows it to be dropped
    assert main(["import", str(FIXTURES / "srun_sbatch.sbatch"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "  --optimizer: mtk always uses adam; the script's sgd trains differently (line 32)" in err
    assert err.splitlines()[-1].endswith("nothing written. Change the script, or write the spec without them: "
                                         "--allow-dropped --optimizer") and not out.exists()
    assert main(["import", str(FIXTURES / "srun_sbatch.sbatch"), "-o", str(out), "--allow-dropped", "--optimizer"]) == 0
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# Imported by `mtk import` from ") and "pretrain_gpt.py, line 41" in lines[0]
    assert lines[1].startswith("# DROPPED with --allow-dropped (1)") and lines[2].startswith("#   --optimizer: ")
    assert "#   torchrun --nnodes: " in text
    spec = yaml.safe_load(text)
    assert list(spec)[:2] == ["name", "cluster"] and spec["model"]["num_layers"] == 12
    load_job(out, backend="slurm")
    assert main(["import", str(FIXTURES / "continued_lines.txt"), "--allow-dropped", "--no-such-flag"]) == 0
    assert "num_layers: 4" in capsys.readouterr().out


def test_the_verb_refuses_text_without_megatron_arguments(tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\necho hello\n")
    assert main(["import", str(script)]) == 2
    assert "no Megatron-LM arguments found" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.sh")]) == 2


def test_the_verb_reads_an_argument_list_from_stdin(monkeypatch, capsys):
    import io

    args = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 " \
           "--train-iters 5 --lr 1e-3"
    monkeypatch.setattr("sys.stdin", io.StringIO(args + "\n"))
    # no --global-batch-size: Megatron-LM's is micro batch × data parallel, and a bare list does not say the world
    assert main(["import", "-", "--name", "From Stdin"]) == 2
    assert "  --global-batch-size: not given: Megatron-LM uses micro batch × data parallel" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(args + " --global-batch-size 16\n"))
    assert main(["import", "-", "--name", "From Stdin"]) == 0
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["name"] == "from-stdin" and spec["model"]["num_layers"] == 2
    assert spec["train"]["global_batch_size"] == 16


def test_bpe_files_without_a_tokenizer_type_read_as_gpt2_bpe():
    result = import_text("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                         "--vocab-file /d/vocab.json --merge-file /d/merges.txt --data-path /d/c_text_document\n")
    assert result.spec["data"]["tokenizer"] == {"vocab_file": "vocab.json", "merge_file": "merges.txt",
                                                "type": "GPT2BPETokenizer"}
    assert any("read as GPT2BPETokenizer" in note for note in result.notes)
