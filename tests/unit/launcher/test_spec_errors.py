"""Bad specs are rejected before any cluster time, each error naming the field, the value and the fix."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from mtk.spec import SpecError, validate

BASE = {
    "name": "demo",
    "cluster": {"nodes": 2, "procs_per_node": 8},
    "model": {"preset": "gpt-1.7b"},
    "parallel": {"tp": 2, "pp": 2},
    "train": {"micro_batch_size": 1, "global_batch_size": 32},
}


def _set(data: dict, dotted: str, value) -> None:
    node = data
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value


DELETE = object()

# (changes, backend, expected field path, fragment of the message)
CASES = [
    ({"nme": "x"}, None, "nme", "unknown key; did you mean 'name'"),
    ({"name": DELETE}, None, "name", "required field is missing"),
    ({"name": "Bad_Name"}, None, "name", "e.g. name: bad-name"),
    ({"model.preset": "gpt-7b"}, None, "model.preset", "did you mean 'gpt-7.5b'"),
    ({"model.hidden_sise": 10}, None, "model.hidden_sise", "did you mean 'hidden_size'"),
    ({"model.num_layers": "many"}, None, "model.num_layers", "valid integer"),
    ({"model.num_layers": 0}, None, "model.num_layers", "greater than or equal to 1"),
    ({"model": {"num_layers": 2}}, None, "model.hidden_size", "required field is missing"),
    ({"model.arch": "bert"}, None, "model.arch", "'gpt' or 'llama'"),
    ({"train.precision": "fp64"}, None, "train.precision", "'fp32', 'bf16', 'fp16' or 'fp8'"),
    ({"train.lr": -1}, None, "train.lr", "greater than 0"),
    ({"train.global_batch_size": 30}, None, "train.global_batch_size", "not divisible by train.micro_batch_size"),
    ({"train.micro_batch_size": 3}, None, "train.global_batch_size", "3 × 4 = 12"),
    ({"train.min_lr": 1.0}, None, "train.min_lr", "is above train.lr"),
    ({"train.lr_warmup_iters": 1000}, None, "train.lr_warmup_iters", "longer than the decay horizon"),
    ({"train.lr_warmup_iters": 5, "train.lr_warmup_fraction": 0.1}, None, "train.lr_warmup_fraction",
     "only one of --lr-warmup-fraction and --lr-warmup-iters"),
    ({"train.lr_warmup_fraction": 1.0}, None, "train.lr_warmup_fraction", "less than 1"),
    ({"train.checkpoint.save_intervall": 5}, None, "train.checkpoint.save_intervall", "did you mean 'save_interval'"),
    ({"parallel.tp": 3}, None, "cluster.procs_per_node", "not divisible by parallel.tp × pp × cp"),
    ({"parallel.tp": 16, "cluster.nodes": 4}, None, "model.num_attention_heads", "multiple of parallel.tp (16)"),
    ({"parallel.pp": 5, "cluster.nodes": 5, "parallel.tp": 1}, None, "model.num_layers", "multiple of parallel.pp (5)"),
    ({"parallel.virtual_pp": 5}, None, "model.num_layers", "parallel.pp × virtual_pp"),
    (
        {"parallel.sequence_parallel": True, "parallel.tp": 1},
        None,
        "parallel.sequence_parallel",
        "needs parallel.tp > 1",
    ),
    (
        {"parallel.cp": 2, "model.seq_length": 2046, "model.max_position_embeddings": 4096},
        None,
        "model.seq_length",
        "multiple of 2 × parallel.cp",
    ),
    ({"model.seq_length": 4096}, None, "model.seq_length", "exceeds model.max_position_embeddings (2048)"),
    ({"model.num_query_groups": 5}, None, "model.num_query_groups", "must divide num_attention_heads"),
    ({"model.hidden_size": 2300}, None, "model.hidden_size", "multiple of num_attention_heads"),
    ({"parallel.ep": 2}, None, "parallel.ep", "needs model.moe.num_experts > 0"),
    (
        {"model.moe": {"num_experts": 6}, "parallel.ep": 4},
        None,
        "model.moe.num_experts",
        "divisible by parallel.ep (4)",
    ),
    ({"model.moe": {"num_experts": 4, "router_topk": 5}}, None, "model.moe.router_topk", "cannot exceed"),
    ({"model.moe": {"num_experts": 8}, "parallel.ep": 8}, None, "parallel.ep", "must divide the 16 GPUs"),
    ({"cluster.device": "cpu", "train.precision": "fp16"}, None, "train.precision", "fp16 needs a GPU"),
    ({"cluster.env": {"BAD-NAME": "1"}}, None, "cluster.env", "not a valid environment variable name"),
    ({"cluster.slurm.time": "forever"}, None, "cluster.slurm.time", "'01:30:00'"),
    ({"cluster.slurm.runtime": "docker"}, None, "cluster.slurm.runtime", "'bare' or 'pyxis'"),
    ({}, "local", "cluster.nodes", "local backend runs on this machine only"),
    ({}, "slurm", "cluster.slurm.container_image", "pyxis runtime needs an image"),
    (
        {"cluster.slurm.runtime": "bare", "cluster.slurm.venv": "/v", "cluster.slurm.conda_env": "c"},
        "slurm",
        "cluster.slurm.conda_env",
        "either cluster.slurm.venv or conda_env",
    ),
    ({}, "eks", "image.registry", "pull the image from a registry"),
    (
        {"image.registry": "r.example", "cluster.runs_dir": "/home/runs"},
        "eks",
        "cluster.runs_dir",
        "must be under cluster.eks.fsx_mount (/fsx)",
    ),
    (
        {"image.registry": "r.example", "cluster.runs_dir": "/fsx/r", "data.dir": "/fsx/d", "cluster.eks.min_nodes": 3},
        "eks",
        "cluster.eks.min_nodes",
        "elastic ranges are not supported",
    ),
    (
        {"image.registry": "r.example", "cluster.eks.fsx_claim": None,
         "data.fetch": [{"url": "https://x.example/y.jsonl", "sha256": "a" * 64}]},
        "eks",
        "cluster.eks.fsx_claim",
        "hand their files to training through shared storage",
    ),
    (
        {"data.tokenizer": {"type": "GPT2BPETokenizer"}},
        None,
        "data.tokenizer.vocab_file",
        "required for tokenizer type GPT2BPETokenizer",
    ),
    (
        {"data.corpus": {"input": "c.jsonl", "output_prefix": "c"}},
        None,
        "data.tokenizer.type",
        "preprocessing a corpus needs a real tokenizer",
    ),
    ({"data.split": "90,10"}, None, "data.split", "three comma-separated numbers"),
    ({"data.fetch": [{"url": "http://x/y", "sha256": "abc"}]}, None, "data.fetch.0.sha256", "should match pattern"),
    ({"data.blend": [{"prefix": "p", "weight": 0}]}, None, "data.blend.0.weight", "greater than 0"),
    ({"debug.bogus": 1}, None, "debug.bogus", "unknown key; valid keys here: nccl_debug"),
    ({"resilience.watchdog.step_timeout": 0}, None, "resilience.watchdog.step_timeout", "greater than 0"),
]


@pytest.mark.parametrize(
    ("changes", "backend", "path", "fragment"), CASES, ids=[c[2] + ("@" + c[1] if c[1] else "") for c in CASES]
)
def test_bad_spec_names_field_and_fix(changes, backend, path, fragment):
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        _set(data, key, value)
    with pytest.raises(SpecError) as info:
        validate(data, backend=backend)
    matching = [p for p in info.value.problems if p.path == path]
    assert matching, f"no problem at {path}; got {[str(p) for p in info.value.problems]}"
    assert any(fragment in p.message for p in matching), [p.message for p in matching]


def test_every_section_of_the_spec_has_a_bad_input_case():
    """Against the schema, not the table's own size: a new section of Job without a case here fails."""
    from mtk.spec import Job

    assert set(Job.model_fields) - {path.split(".")[0] for _, _, path, _ in CASES} == set()


def test_base_spec_is_valid():
    job = validate(copy.deepcopy(BASE))
    assert job.model.num_layers == 24 and job.model.hidden_size == 2304  # from the preset


def test_explicit_fields_override_preset():
    data = copy.deepcopy(BASE)
    data["model"]["num_layers"] = 8
    job = validate(data)
    assert job.model.num_layers == 8 and job.model.num_attention_heads == 24


def test_every_problem_reported_at_once():
    data = copy.deepcopy(BASE)
    data["parallel"]["sequence_parallel"] = True
    data["parallel"]["tp"] = 1
    data["train"]["global_batch_size"] = 33
    with pytest.raises(SpecError) as info:
        validate(data)
    paths = {p.path for p in info.value.problems}
    assert {"parallel.sequence_parallel", "train.global_batch_size"} <= paths


def test_missing_files_are_named(tmp_path):
    data = copy.deepcopy(BASE)
    data["data"] = {
        "dir": str(tmp_path),
        "blend": [{"prefix": "missing/p"}],
        "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "v.json", "merge_file": "m.txt"},
    }
    with pytest.raises(SpecError) as info:
        validate(data, check_files=True)
    paths = {p.path for p in info.value.problems}
    assert {"data.blend.0.prefix", "data.tokenizer.vocab_file", "data.tokenizer.merge_file"} <= paths


def test_files_produced_by_earlier_steps_are_not_required(tmp_path):
    data = copy.deepcopy(BASE)
    data["data"] = {
        "dir": str(tmp_path),
        "fetch": [
            {"url": "https://example.org/vocab.json"},
            {"url": "https://example.org/merges.txt"},
            {"url": "https://example.org/corpus.jsonl.xz"},
        ],
        "corpus": {"input": "corpus.jsonl", "output_prefix": "gpt2"},
        "blend": [{"prefix": "gpt2_text_document"}],
        "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": "vocab.json", "merge_file": "merges.txt"},
    }
    job = validate(data, check_files=True)
    assert job.steps() == ["getdata", "preprocess", "train"]


def test_cli_exits_2_without_traceback(tmp_path):
    spec = copy.deepcopy(BASE)
    spec["parallel"]["tp"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = subprocess.run(
        [sys.executable, "-m", "mtk.launcher.cli", "validate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "cluster.procs_per_node" in out.stderr and "parallel.tp × pp × cp" in out.stderr


def test_yaml_syntax_error_names_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nmodel: [unclosed\n")
    out = subprocess.run(
        [sys.executable, "-m", "mtk.launcher.cli", "validate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "line 3" in out.stderr or "line 2" in out.stderr


def test_set_override_type_error_names_field(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(BASE))
    out = subprocess.run(
        [sys.executable, "-m", "mtk.launcher.cli", "validate", str(path), "--set", "train.iterations=lots"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "train.iterations" in out.stderr


@pytest.mark.parametrize(("cluster", "named"), [
    ({"secrets": [{"nme": "HF_TOKEN"}]}, "cluster.secrets.0.nme: unknown key; did you mean 'name'?"),
    ({"local": {"rdzv_prt": 20000}}, "cluster.local.rdzv_prt: unknown key; did you mean 'rdzv_port'?"),
    ({"slurm": {"partion": "gpu"}}, "cluster.slurm.partion: unknown key; did you mean 'partition'?"),
    ({"slrum": {}}, "cluster.slrum: unknown key; did you mean 'slurm'?"),
])
def test_a_typo_in_cluster_gets_the_owning_models_keys(cluster, named):
    """cluster's own sections and each backend's block (its backend's model) both suggest from the right keys."""
    from mtk.spec import SpecError, validate

    with pytest.raises(SpecError) as err:
        validate({"name": "typo", "model": {"preset": "tiny"}, "cluster": {"device": "cpu", **cluster}})
    assert named in str(err.value)


def _at(root: object, dotted: str) -> object:
    """The value at a problem's path: attributes of a Job (or keys of a dict), list items by index."""
    node = root
    for part in dotted.split("."):
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            node = getattr(node, part)
    return node


@pytest.mark.parametrize(("changes", "backend", "path", "fragment"), CASES,
                         ids=[c[2] + ("@" + c[1] if c[1] else "") for c in CASES])
def test_the_value_shown_is_the_named_fields_own(changes, backend, path, fragment):
    """``field (got X)``: X is what that field holds (a cross-field rule's product goes in its message), e.g.
    ``cluster.procs_per_node (got 8)`` for 8 per node, never the 16 GPUs of two nodes."""
    from pydantic import ValidationError

    from mtk.spec import Job

    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        _set(data, key, value)
    with pytest.raises(SpecError) as info:
        validate(data, backend=backend)
    try:
        root: object = Job.model_validate(data)  # the fields are valid: a rule's value is the Job's
    except ValidationError:
        root = data  # a field error shows the input as given
    for p in info.value.problems:
        if p.value is None:
            continue
        try:
            held = _at(root, p.path)
        except (AttributeError, KeyError, IndexError, ValueError):
            continue  # a path that is no field (a file, a line)
        assert p.value == held, f"{p}: {p.path} holds {held!r}"


def test_world_size_problem_shows_procs_per_node_not_the_total():
    data = copy.deepcopy(BASE)
    data["parallel"]["tp"] = 3
    with pytest.raises(SpecError) as info:
        validate(data)
    assert "cluster.procs_per_node (got 8): nodes × procs_per_node = 2 × 8 = 16 GPUs" in str(info.value)


def test_field_errors_and_rules_over_valid_sections_come_together():
    """README: "every problem at once". A field error in one section no longer hides the cross-section rules over
    the others; a rule that reads the failed section is left out (it would judge a stand-in)."""
    data = copy.deepcopy(BASE)
    data["parallel"]["tp"] = 3  # cluster × parallel: 16 GPUs not divisible by 3
    data["model"]["num_layers"] = "many"  # a field error in model
    data["train"] = {"precision": "fp16"}
    data["cluster"]["device"] = "cpu"  # cluster × train: fp16 needs a GPU
    with pytest.raises(SpecError) as info:
        validate(data, backend="local")
    paths = [p.path for p in info.value.problems]
    assert paths[0] == "model.num_layers"  # the field errors first, as before
    assert {"cluster.procs_per_node", "train.precision", "cluster.nodes"} <= set(paths), paths
    assert "model.num_attention_heads" not in paths  # a rule over model (failed): skipped
    assert paths.count("model.num_layers") == 1


def test_rules_reading_a_failed_section_are_skipped_not_guessed():
    data = copy.deepcopy(BASE)
    data["cluster"] = {"nodes": "two", "procs_per_node": 8}  # cluster fails: every rule reading it is left out
    data["parallel"]["tp"] = 5  # with a stand-in cluster this would be a world-size problem: it must not appear
    data["train"]["min_lr"] = 1.0  # train alone: reported
    with pytest.raises(SpecError) as info:
        validate(data, backend="slurm")
    paths = [p.path for p in info.value.problems]
    assert paths == ["cluster", "model.num_attention_heads", "train.min_lr"], paths  # heads: model × parallel
    assert "nodes 'two'" in str(info.value)


def test_a_failed_required_section_and_a_top_level_error_still_report_their_fields():
    data = copy.deepcopy(BASE)
    data["name"] = "Bad_Name"
    data["model"] = {"preset": "nope"}
    data["cluster"]["device"] = "cpu"
    data["train"]["precision"] = "fp16"  # cluster × train: reported
    data["train"]["min_lr"] = 1.0  # train × model (the schedule's token count): model failed, left out
    with pytest.raises(SpecError) as info:
        validate(data)
    paths = [p.path for p in info.value.problems]
    assert paths == ["name", "model.preset", "train.precision"], paths
    with pytest.raises(SpecError) as info:
        validate(["not", "a", "mapping"])  # type: ignore[arg-type]
    assert [p.path for p in info.value.problems] == ["(top level)"]


def test_the_spec_guides_example_error_is_what_validate_prints(tmp_path):
    """docs/spec-guide.md shows validate's answer to a spec with a typo and a GPU count tp does not divide: the
    same lines, in the same order (its "..." elides)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "spec-guide.md").read_text()
    block = guide[guide.index("error: invalid job spec in job.yaml:"):]
    block = block[:block.index("```")]
    shown = [" ".join(item.split()) for item in block.split("\n  - ")[1:]]
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "parallel": {"tp": 3}, "train": {"itrations": 5},
                                    "cluster": {"nodes": 2, "procs_per_node": 8, "slurm": {"runtime": "bare"}}}))
    out = subprocess.run([sys.executable, "-m", "mtk", "validate", str(spec)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: invalid job spec in ")
    printed = [line.removeprefix("  - ") for line in out.stderr.splitlines()[1:]]
    assert [p[:len(s.removesuffix("...").rstrip())] for p, s in zip(printed, shown, strict=False)] == [
        s.removesuffix("...").rstrip() for s in shown]
    assert len(printed) == len(shown), printed
