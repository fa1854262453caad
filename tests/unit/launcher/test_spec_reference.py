"""The spec reference is made from the models (mtk/spec/reference.py): the committed docs/spec.md equals what
they make today, the JSON schema `mtk schema` prints accepts every example and refuses a typo where the loader
does, and `mtk presets` lists every preset with the size the figures compute."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from mtk.launcher.cli import main

from mtk.spec.presets import PRESETS
from mtk.spec.reference import json_schema, markdown

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def test_committed_reference_equals_the_models():
    assert (REPO / "docs" / "spec.md").read_text() == markdown(), (
        "docs/spec.md is stale: run `python -m mtk.spec.reference docs/spec.md` and commit it")


def test_reference_documents_every_section_and_backend_block():
    page = markdown()
    for section in ("cluster", "cluster.slurm", "cluster.eks", "train.checkpoint", "model.moe", "data.tokenizer"):
        assert f"\n## `{section}`\n" in page
    assert "| `tp` |" in page and "| `partition` |" in page


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_schema_accepts_every_example(example):
    jsonschema.validate(yaml.safe_load(example.read_text()), json_schema())


def test_schema_refuses_an_unknown_key_in_a_backend_block(capsys):
    spec = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    spec.setdefault("cluster", {})["slurm"] = {"partion": "gpu"}
    with pytest.raises(jsonschema.ValidationError, match="partion"):
        jsonschema.validate(spec, json_schema())


def test_mtk_schema_prints_the_same_schema(capsys, tmp_path):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(json_schema()))
    assert main(["schema", "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["title"] == "mtk job spec"


def test_mtk_presets_lists_every_preset(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == list(PRESETS)
    assert any(line.startswith("llama3-8b ") and "128,256" in line and "8.03B" in line for line in lines)
    assert main(["presets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tiny"]["vocab_size"] == 1024
