"""Fixtures of the EKS integration tests.

- ``standin``: a STAND-IN for the Kubernetes API server on 127.0.0.1 (no real API server runs here), reached
  by the real Kubernetes Python client through a kubeconfig, so mtk's apply/status/logs/cancel code runs
  unchanged.
- ``pod_net_factory`` (tests/conftest.py; PodNet in tests/support/pod_net.py): a real etcd and a private
  network namespace in which rendered pods run as plain processes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


standin_mod = load_module(HERE / "apiserver_standin.py", "mtk_tests_apiserver_standin")
JOBS = load_module(HERE.parents[1] / "unit" / "k8s" / "k8s_jobs.py", "mtk_tests_k8s_jobs")
TOKEN = "standin-bearer-token-4f9c"  # a fake credential: tests prove it never lands in files


@pytest.fixture
def k8s_jobs():
    """The shared job specs (tests/unit/k8s/k8s_jobs.py)."""
    return JOBS


@pytest.fixture
def kube_token() -> str:
    return TOKEN


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The API-server stand-in plus a kubeconfig pointing at it (with a bearer token)."""
    with standin_mod.StandIn() as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: standin\n  cluster:\n    server: {server.url}\n"
            f"users:\n- name: tester\n  user:\n    token: {TOKEN}\n"
            "contexts:\n- name: standin\n  context:\n    cluster: standin\n    user: tester\n"
            "current-context: standin\n")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server
