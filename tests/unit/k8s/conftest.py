"""Fixtures of the EKS unit tests: job specs from ``k8s_jobs.py`` (loaded by path: importlib import mode)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def load_helper(name: str = "k8s_jobs"):
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"mtk_tests_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JOBS = load_helper()


@pytest.fixture(scope="session")
def tiny_eks():
    """Factory: the tiny CPU job as a 2-pod PyTorchJob, with optional section overrides."""
    return JOBS.tiny_eks


@pytest.fixture
def example_7b():
    return JOBS.example_7b()
