"""A new backend is one module plus one registration: the toy backend in tests/support/toy_backend is registered
through the ``mtk.backends`` entry point of the dist-info beside it, and the real CLI validates, renders, submits,
follows and cancels a job on it with no other file of mtk knowing its name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOY = ROOT / "tests" / "support" / "toy_backend"
TINY = ROOT / "examples" / "tiny.yaml"


def mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One real launch on the toy backend, shared by the assertions below; cancelled at the end."""
    cwd = tmp_path_factory.mktemp("toy")
    run_dir = cwd / "runs" / "toy-run"
    out = mtk("launch", str(TINY), "--backend", "toy", "--run-dir", str(run_dir), "--set", "cluster.runs_dir=runs",
              cwd=cwd)
    yield cwd, run_dir, out
    if (run_dir / "run.json").exists() and not (run_dir / "toy.cancelled").exists():
        mtk("cancel", str(run_dir), cwd=cwd)  # the test failed before it cancelled: stop the process it started


def _status(cwd: Path, run_dir: Path) -> dict:
    out = mtk("status", str(run_dir), "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return {s["step"]: s for s in json.loads(out.stdout)}


def test_the_backend_validates_the_job_for_itself(tmp_path):
    out = mtk("launch", str(TINY), "--backend", "toy", "--dry-run", "--set", "cluster.nodes=2", cwd=tmp_path)
    assert out.returncode == 2 and "cluster.nodes" in out.stderr and "toy backend runs one node" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_the_backend_brings_its_own_block_of_options(tmp_path):
    """cluster.toy is validated by the toy backend's own model: a value it takes reaches the render, a key it does
    not take is refused by name; without the plugin installed the block is an unknown key like any other."""
    out = mtk("launch", str(TINY), "--backend", "toy", "--dry-run", "--out", str(tmp_path / "preview"),
              "--set", "cluster.toy.greeting=waved", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "toy run of tiny waved" in (tmp_path / "preview" / "toy-run.sh").read_text()
    bad = mtk("validate", str(TINY), "--backend", "toy", "--set", "cluster.toy.greting=x", cwd=tmp_path)
    assert bad.returncode == 2 and "cluster.toy.greting" in bad.stderr and "did you mean 'greeting'" in bad.stderr
    plain = subprocess.run([sys.executable, "-m", "mtk", "validate", str(TINY), "--set", "cluster.toy.greeting=x"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == 2 and "cluster.toy: unknown key" in plain.stderr, plain.stderr


def test_a_dry_run_renders_through_the_backend(tmp_path):
    out = mtk("launch", str(TINY), "--backend", "toy", "--dry-run", "--out", str(tmp_path / "preview"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "backend: toy" in out.stdout and "toy-run.sh" in out.stdout and "nothing submitted" in out.stdout
    assert (tmp_path / "preview" / "toy-run.sh").read_text().startswith("#!/bin/sh")


def test_submit_status_and_cancel_through_the_cli(launched):
    cwd, run_dir, out = launched
    assert out.returncode == 0, out.stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"] == "toy" and f"run: {run_dir}" in out.stdout
    deadline = time.monotonic() + 120  # the script writes its log line once it runs
    while not (run_dir / "logs" / "toy.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _status(cwd, run_dir)["train"]["state"] == "RUNNING"
    logs = mtk("logs", str(run_dir), cwd=cwd)
    assert "toy run of tiny started" in logs.stdout, logs.stderr
    rendered = mtk("render", str(TINY), "--backend", "toy", "--out", str(cwd / "runs" / "rendered"), cwd=cwd)
    assert rendered.returncode == 0, rendered.stderr
    ls = mtk("ls", "--runs-dir", "runs", "--json", "--all", cwd=cwd)  # the submitted run, and the rendered one
    assert sorted((r["backend"], r["state"]) for r in json.loads(ls.stdout)) == [("toy", "RENDERED"),
                                                                                 ("toy", "RUNNING")], ls.stderr
    cancelled = mtk("cancel", str(run_dir), cwd=cwd)
    assert cancelled.returncode == 0 and "cancelled tiny" in cancelled.stdout, cancelled.stderr
    assert _status(cwd, run_dir)["train"]["state"] == "CANCELLED"
    assert not Path(f"/proc/{record['ids']['train']}").exists() or \
        Path(f"/proc/{record['ids']['train']}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"

