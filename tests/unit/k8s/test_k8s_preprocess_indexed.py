"""A sharded preprocess on EKS: an Indexed Job (completionMode Indexed, completions = shards, parallelism =
max_parallel) that kubernetes-validate accepts strictly, asking for the CPUs its workers use. That the same
command with JOB_COMPLETION_INDEX really produces the merged dataset is tested in
tests/unit/data/test_data_preprocess_sharded.py (it runs the rendered command as local processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from mtk.k8s import manifests

RUN_DIR = "/fsx/runs/tiny-eks-20261122-010203"
TOKENIZER = {"type": "GPT2BPETokenizer", "vocab_file": "vocab.json", "merge_file": "merges.txt"}
CORPUS = {"input": "corpus", "output_prefix": "tok/c", "workers": 2}


def _preprocess_job(tiny_eks, **corpus) -> dict:
    job = tiny_eks(data={"corpus": {**CORPUS, **corpus}, "tokenizer": TOKENIZER})
    [obj] = [o for o in manifests.build(job, RUN_DIR) if o.step == "preprocess"]
    return obj.body


def test_sharded_preprocess_is_an_indexed_job_that_validates_strictly(tiny_eks, tmp_path):
    body = _preprocess_job(tiny_eks, shards=4, max_parallel=2)
    spec = body["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 2)
    [container] = spec["template"]["spec"]["containers"]
    assert container["command"] == manifests.step_command("preprocess", RUN_DIR)
    assert container["resources"] == {"requests": {"cpu": "2"}}
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    kubernetes_validate.validate(body, "1.32", strict=True)
    from mtk.k8s import yamlio

    path = tmp_path / "preprocess.yaml"
    path.write_text(yamlio.dump_all([body]))
    cli = Path(sys.executable).with_name("kubernetes-validate")
    out = subprocess.run([str(cli), "--strict", "--quiet", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_validation_is_not_vacuous_for_the_indexed_fields(tiny_eks):
    body = _preprocess_job(tiny_eks, shards=4)
    body["spec"]["parallelism"] = "all"  # an int field, and strict mode rejects unknown fields
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(body, "1.32", strict=True)
    body = _preprocess_job(tiny_eks, shards=4)
    body["spec"]["completionIndex"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(body, "1.32", strict=True)


def test_unsharded_preprocess_stays_a_plain_job(tiny_eks):
    spec = _preprocess_job(tiny_eks)["spec"]
    assert "completionMode" not in spec and "parallelism" not in spec
    spec_all = _preprocess_job(tiny_eks, shards=3)["spec"]
    assert spec_all["parallelism"] == 3
