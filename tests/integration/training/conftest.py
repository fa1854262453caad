"""Helpers for the engine's integration tests: write a job, run torchrun (2 CPU ranks, gloo), read metrics.

Every run is a real ``torchrun --standalone --nproc-per-node N -m mtk.training.worker``; fixtures that
start runs wait for them or kill them (by pid) before returning.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mtk.spec.loader import apply_overrides, validate

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny.yaml"
RUN_TIMEOUT = 300


def make_job(run_dir: Path, *sets: str) -> Path:
    """examples/tiny.yaml + ``dotted.key=value`` overrides → ``<run_dir>/job.json`` (validated)."""
    data = yaml.safe_load(TINY.read_text())
    base = ["data.num_workers=0", f"data.dir={run_dir / 'data'}", "train.log_interval=1",
            "train.eval_interval=null", "debug.env_dump=false"]
    job = validate(apply_overrides(data, [*base, *sets]))
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "job.json"
    path.write_text(job.to_json())
    return path


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SLURM_RESTART_COUNT", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def start(run_dir: Path, nproc: int = 2, env: dict[str, str] | None = None, tag: str = "run") -> subprocess.Popen:
    log = open(run_dir / f"{tag}.log", "w")  # noqa: SIM115 - handed to the child; closed in finish()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "mtk.training.worker", "--job", str(run_dir / "job.json"), "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, cwd=run_dir, env=_env(env), stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = run_dir / f"{tag}.log"  # type: ignore[attr-defined]
    proc.log_file = log  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"torchrun did not finish in {timeout}s; log:\n{tail(proc)}") from None
    finally:
        proc.log_file.close()  # type: ignore[attr-defined]


def run(run_dir: Path, nproc: int = 2, env: dict[str, str] | None = None, tag: str = "run") -> int:
    return finish(start(run_dir, nproc, env, tag))


def tail(proc: subprocess.Popen, n: int = 60) -> str:
    return "\n".join(Path(proc.log_path).read_text(errors="replace").splitlines()[-n:])  # type: ignore


def workers(proc: subprocess.Popen) -> list:
    import psutil

    return [c for c in psutil.Process(proc.pid).children(recursive=True)]


def kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    for p in kids:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.kill()
    proc.wait()


def signal_workers(proc: subprocess.Popen, sig: int) -> int:
    """Send ``sig`` to the training ranks (torchrun's children), as Slurm/k8s deliver it to every task."""
    sent = 0
    for p in workers(proc):
        if "mtk.training.worker" in " ".join(p.cmdline()):
            os.kill(p.pid, sig)
            sent += 1
    return sent


def records(run_dir: Path, kind: str = "train") -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == kind]


def by_iteration(run_dir: Path) -> dict[int, dict]:
    """Train records keyed by iteration; a later record (after a resume) replaces an earlier one."""
    return {r["iteration"]: r for r in records(run_dir)}


def wait_for_iteration(proc: subprocess.Popen, run_dir: Path, iteration: int, timeout: float = RUN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r["iteration"] >= iteration for r in records(run_dir)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc={proc.returncode}) before iteration {iteration}:\n{tail(proc)}")
        time.sleep(0.2)
    kill_tree(proc)
    raise AssertionError(f"iteration {iteration} not reached in {timeout}s")


def wait_until(proc: subprocess.Popen, what: str, ready, timeout: float = RUN_TIMEOUT) -> None:
    """Poll ``ready()`` while the run lives; the deadline only fails a hung run."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc={proc.returncode}) before {what}:\n{tail(proc)}")
        if time.monotonic() > deadline:
            kill_tree(proc)
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.05)


def last_exit(run_dir: Path) -> dict:
    return json.loads((run_dir / "state" / "last_exit.json").read_text())


def tracker(ckpt_dir: Path) -> int:
    return int((ckpt_dir / "latest_checkpointed_iteration.txt").read_text())


def copy_checkpoint(src_ckpt: Path, iteration: int, dst_run: Path) -> Path:
    """A run dir whose checkpoints/ holds only ``iteration`` from ``src_ckpt`` (tracker pointing at it)."""
    dst = dst_run / "checkpoints"
    name = f"iter_{iteration:07d}"
    shutil.copytree(src_ckpt / name, dst / name)
    (dst / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return dst


@pytest.fixture(scope="session")
def engine_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("engine")


@pytest.fixture(scope="session")
def tr():
    """The helpers above, for test modules (conftest is not importable under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(
        make_job=make_job, start=start, finish=finish, run=run, tail=tail, kill_tree=kill_tree,
        signal_workers=signal_workers, records=records, by_iteration=by_iteration,
        wait_for_iteration=wait_for_iteration, wait_until=wait_until, last_exit=last_exit, tracker=tracker,
        copy_checkpoint=copy_checkpoint, env=_env, RUN_TIMEOUT=RUN_TIMEOUT)


def write_indexed_corpus(prefix: Path, n_docs: int, seed: int, eod: int = 1023) -> Path:
    """Documents of arithmetic progressions mod 1000 (learnable: next = current + step), written with
    megatron.core's IndexedDatasetBuilder; each ends with EOD."""
    import numpy as np
    import torch
    from mtk.training import compat

    compat.install_import_stubs()  # importing megatron.core needs the triton stub here too
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for _ in range(n_docs):
        start, step, length = rng.integers(0, 1000), rng.integers(1, 8), rng.integers(40, 200)
        doc = (start + step * np.arange(length)) % 1000
        builder.add_document(torch.from_numpy(np.append(doc, eod).astype(np.int64)), [length + 1])
    builder.finalize(f"{prefix}.idx")
    return prefix


@pytest.fixture(scope="session")
def indexed_corpus(engine_root) -> list[Path]:
    """Two prefixes (blended 0.7/0.3 by the tests)."""
    root = engine_root / "corpus"
    root.mkdir()
    return [write_indexed_corpus(root / "alpha_text_document", 300, 1),
            write_indexed_corpus(root / "beta_text_document", 200, 2)]
