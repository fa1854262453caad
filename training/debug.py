"""Debug switches from ``job.debug``: an environment dump at start and a torch.profiler window.

NCCL debug files and Nsight are argv/env-level and handled by the launchers; the environment dump records
what they set so a run dir shows it.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtk import run_layout
from mtk.files import atomic_write, written_by_path
from mtk.secrets import redact_env


def _secret_names(run_dir: str | Path | None) -> list[str]:
    """``cluster.secrets`` of this run (names only), read from its job.json without building the model."""
    try:
        job = json.loads((Path(run_dir) / run_layout.JOB_FILE).read_text()) if run_dir else {}
        return [ref["name"] for ref in job.get("cluster", {}).get("secrets", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _redact(env: dict[str, str], names: Sequence[str] = ()) -> dict[str, str]:
    """Secrets by name (credential-like names and cluster.secrets: only 'set, N chars') and by value (a
    secret's value, URL user:password@, token query parameters inside any other variable)."""
    return redact_env(env, names)


def _versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("torch", "megatron-core", "numpy", "transformer-engine", "triton", "mtk"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def environment_record(rank: int, topology: dict[str, Any], secret_names: Sequence[str] = ()) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "host": socket.gethostname(),
        "rank": rank,
        "pid": os.getpid(),
        "versions": _versions(),
        "torch": {"cuda_available": cuda, "cuda": torch.version.cuda,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                  "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
                  "threads": torch.get_num_threads()},
        "cpus": os.cpu_count(),
        "topology": topology,
        "env": _redact(dict(os.environ), list(secret_names)),
    }


def dump_environment(run_dir: str | Path, rank: int, topology: dict[str, Any]) -> Path:
    """Write ``<run_dir>/debug/env-<host>-rank<r>.json`` (versions, env with secrets redacted, topology)."""
    path = Path(run_dir) / run_layout.DEBUG_DIR / f"env-{socket.gethostname()}-rank{rank}.json"
    record = environment_record(rank, topology, _secret_names(run_dir))
    atomic_write(path, json.dumps(record, indent=2, default=str) + "\n", 0o600)
    return path


class ProfilerWindow:
    """torch.profiler over iterations [start, stop) on the chosen ranks; Chrome trace into ``debug/``."""

    def __init__(self, spec, run_dir: str | Path, rank: int):
        self.enabled = bool(spec.enabled) and rank in spec.ranks
        self.start, self.stop = spec.start, spec.stop
        self.path = Path(run_dir) / run_layout.DEBUG_DIR / f"torch-trace-{socket.gethostname()}-rank{rank}.json"
        self._prof: Any = None  # torch.profiler.profile while tracing

    def before(self, iteration: int) -> None:
        """Call with the 1-based iteration about to run."""
        if self.enabled and self._prof is None and self.start <= iteration < self.stop:
            import torch

            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(activities=acts, record_shapes=True)
            self._prof.__enter__()

    def after(self, iteration: int) -> None:
        if self._prof is not None and iteration + 1 >= self.stop:
            self.finish()

    def finish(self) -> None:
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with written_by_path(self.path) as tmp:  # torch writes by path: into a folder only this user can enter
            prof.export_chrome_trace(str(tmp))
        self.enabled = False


class NsysWindow:
    """Open Nsight Systems' capture range over iterations [start, stop) on the chosen ranks.

    The Slurm script runs those ranks under ``nsys profile --capture-range=cudaProfilerApi``; nsys records only
    between cudaProfilerStart/Stop, which this calls. Without CUDA (CPU runs, CI) it does nothing.
    """

    def __init__(self, spec, rank: int):
        import torch

        self.enabled = bool(spec.enabled) and rank in spec.ranks and torch.cuda.is_available()
        self.start, self.stop = spec.start, spec.stop
        self.active = False

    def before(self, iteration: int) -> None:
        if self.enabled and not self.active and self.start <= iteration < self.stop:
            import torch

            torch.cuda.profiler.start()
            self.active = True

    def after(self, iteration: int) -> None:
        if self.active and iteration + 1 >= self.stop:
            self.finish()

    def finish(self) -> None:
        if self.active:
            import torch

            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            self.active, self.enabled = False, False
