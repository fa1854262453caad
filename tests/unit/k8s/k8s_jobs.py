"""Job specs shared by the EKS tests: the tiny CPU model as a 2-pod PyTorchJob, and the 7.5B p5 example."""

from __future__ import annotations

import copy
from pathlib import Path

from mtk.spec import load_job
from mtk.spec.loader import validate

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_7B = REPO / "examples" / "gpt-7.5b-p5-eks.yaml"

TINY_EKS = {
    "name": "tiny-eks",
    "image": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "name": "mtk", "tag": "t1"},
    "cluster": {"nodes": 2, "procs_per_node": 1, "device": "cpu", "runs_dir": "/fsx/runs",
                # etcd, AWS's reference rendezvous: these tests follow the etcd Deployment through apply, wait,
                # status and cancel; c10d (the default) has its own cases (rendezvous: c10d).
                "eks": {"fsx_mount": "/fsx", "shm_size": "1Gi", "rendezvous": "etcd"}},
    "data": {"dir": "/fsx/data"},
    "model": {"preset": "tiny"},
    "parallel": {"tp": 2},
    "train": {"micro_batch_size": 2, "global_batch_size": 4, "iterations": 24, "lr": 1e-3, "min_lr": 1e-4,
              "lr_warmup_iters": 2, "precision": "fp32", "log_interval": 1,
              "checkpoint": {"save_interval": 4}},
}


def tiny_eks(**overrides) -> object:
    """The tiny job for the eks backend; ``overrides`` are merged into the top-level sections."""
    data = copy.deepcopy(TINY_EKS)
    for section, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(section), dict):
            _merge(data[section], value)
        else:
            data[section] = value
    return validate(data, backend="eks")


def _merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


def example_7b():
    from mtk.launcher.paths import resolve_paths

    return resolve_paths(load_job(EXAMPLE_7B, backend="eks"), "eks")
