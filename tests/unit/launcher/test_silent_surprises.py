"""Settings mtk used to accept and then ignore or guess at: each is now honoured or refused with its field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from mtk.launcher.cli import cli

from mtk.spec import SpecError
from mtk.spec.loader import validate

REPO = Path(__file__).resolve().parents[3]
TINY = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
CORPUS = {"input": "corpus.jsonl", "output_prefix": "web"}


def _job(data_section: dict, backend: str | None = None, cluster: dict | None = None, **debug):
    tokenizer = {"type": "HuggingFaceTokenizer", "model": "tokenizer.json"}  # a corpus needs a real tokenizer
    data = {**TINY, "data": {"dir": "/data", "tokenizer": tokenizer, **data_section}, "debug": debug}
    data["cluster"] = {**TINY["cluster"], **(cluster or {})}
    return validate(data, backend=backend)


def test_corpus_beside_a_weighted_blend_must_state_its_weight():
    with pytest.raises(SpecError) as err:
        _job({"corpus": CORPUS, "blend": [{"prefix": "books", "weight": 0.3}]})
    assert [p.path for p in err.value.problems] == ["data.corpus.weight"]
    assert "books=0.3" in str(err.value)


def test_corpus_weight_is_the_weight_training_uses():
    from mtk.training.data import blend

    job = _job({"corpus": {**CORPUS, "weight": 0.7}, "blend": [{"prefix": "books", "weight": 0.3}]})
    assert blend(job) == (["/data/books", "/data/web_text_document"], [0.3, 0.7])
    alone = _job({"corpus": CORPUS})  # a corpus alone is the whole data: no weight needed
    assert blend(alone)[1] == [1.0]
    named = _job({"corpus": CORPUS, "blend": [{"prefix": "web_text_document", "weight": 0.4},
                                              {"prefix": "books", "weight": 0.6}]})  # the blend weighs it already
    assert blend(named) == (["/data/web_text_document", "/data/books"], [0.4, 0.6])


@pytest.mark.parametrize("backend", ["local", "eks"])
def test_nsight_on_a_backend_without_it_is_refused(backend):
    with pytest.raises(SpecError) as err:
        _job({}, backend, nsys={"enabled": True})
    problems = {p.path: p.message for p in err.value.problems}  # eks also wants its registry/FSx paths here
    assert "debug.nsys.enabled" in problems and "torch_profiler" in problems["debug.nsys.enabled"]


def test_nsight_on_slurm_is_accepted():
    bare = {"slurm": {"runtime": "bare"}}
    assert _job({}, "slurm", cluster=bare, nsys={"enabled": True}).debug.nsys.enabled


def test_dry_run_of_the_p5_slurm_example_writes_a_local_preview_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["launch", str(REPO / "examples" / "gpt-7.5b-p5-slurm.yaml"), "--backend", "slurm", "--dry-run",
            "--no-megatron-check"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    cluster_dir = Path(re.search(r"^run dir: (\S+)", result.output, re.M).group(1))
    assert cluster_dir.is_absolute() and not cluster_dir.exists()  # /fsx/runs/<run> is the cluster's
    preview = tmp_path / "runs" / cluster_dir.name
    assert f"preview written to {preview}" in result.output
    assert (preview / "train.sbatch").is_file() and (preview / "job.json").is_file()
    assert str(cluster_dir) in (preview / "train.sbatch").read_text()  # the scripts still name the cluster's path

    out = tmp_path / "elsewhere"
    again = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert again.exit_code == 0 and (out / "train.sbatch").is_file() and f"preview written to {out}" in again.output
