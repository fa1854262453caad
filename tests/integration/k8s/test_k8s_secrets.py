"""cluster.eks.sync_secrets: the Secret is created through the API from this machine's environment, before
anything that references it, and its value is in no rendered file or saved record (API-server stand-in)."""

from __future__ import annotations

import pytest
from mtk.k8s.backend import EksBackend

from mtk.spec import SpecError

pytestmark = pytest.mark.integration

TOKEN = "hf_EksSecret_9d8c7b6a5f4e3d2c"


def _job(k8s_jobs, sync=True):
    return k8s_jobs.tiny_eks(cluster={"secrets": ["HF_TOKEN", {"name": "WANDB_API_KEY", "k8s_secret": "team-wandb",
                                                              "key": "api-key"}],
                                      "eks": {"sync_secrets": sync}})


def test_sync_secrets_applies_the_secret_first_and_writes_its_value_nowhere(standin, k8s_jobs, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("WANDB_API_KEY", "wandb-key-0000")
    job = _job(k8s_jobs)
    backend = EksBackend(poll=0.01, say=lambda msg: None)
    art = backend.render(job, str(tmp_path / "tiny-eks-20261122-010203"))
    art.write()
    backend.submit(job, art)
    patches = [(r.kind, r.name) for r in standin.state.requests if r.method == "PATCH"]
    assert patches[:2] == [("Secret", "tiny-eks-secrets"), ("Secret", "team-wandb")]
    stored = {name: obj for (_, plural, name), obj in standin.state.objects.items() if plural == "secrets"}
    assert stored["tiny-eks-secrets"]["stringData"] == {"HF_TOKEN": TOKEN}
    assert stored["team-wandb"]["stringData"] == {"api-key": "wandb-key-0000"}
    for f in (tmp_path).rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert TOKEN not in text and "wandb-key-0000" not in text, f


def test_sync_secrets_refuses_before_any_request_when_a_value_is_missing(standin, k8s_jobs, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 8)
    job = _job(k8s_jobs)
    backend = EksBackend(poll=0.01, say=lambda msg: None)
    art = backend.render(job, str(tmp_path / "tiny-eks-20261122-010204"))
    art.write()
    with pytest.raises(SpecError, match=r"cluster\.secrets\.0\.name"):
        backend.submit(job, art)
    assert not [r for r in standin.state.requests if r.method == "PATCH"]
