"""`mtk build-image` CLI: dry run writes the plan without docker; SDKs stay unimported; errors are clear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
JOB = str(REPO / "examples" / "tiny.yaml")
PROBE = ("import sys; from mtk.launcher.cli import main; code = main(sys.argv[1:]); "
         "heavy = sorted(m for m in ('docker', 'boto3', 'spython', 'torch') if m in sys.modules); "
         "print('HEAVY', heavy, file=sys.stderr); sys.exit(code)")


def mtk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)


def test_help_lists_the_verb_without_heavy_imports():
    proc = mtk("--help")
    assert proc.returncode == 0 and "build-image" in proc.stdout and "HEAVY []" in proc.stderr
    proc = mtk("build-image", "--help")
    assert proc.returncode == 0 and "--sqsh [PATH]" in proc.stdout and "HEAVY []" in proc.stderr


def test_dry_run_writes_dockerfile_and_listing_and_touches_no_daemon(tmp_path):
    out = tmp_path / "out"
    proc = mtk("build-image", JOB, "--dry-run", "--out", str(out), "--base-image", "local/py:1",
               "--build-arg", "INSTALL_EFA=0", "--set", "image.sqsh=/fsx/mtk.sqsh", "--sqsh", "--sif", "/fsx/m.sif")
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY ['spython']" in proc.stderr  # the .def is written; docker/boto3 never load
    assert (out / "context" / "Dockerfile").read_text().startswith("# Rendered by `mtk build-image`")
    assert "ARG BASE_IMAGE=local/py:1" in (out / "context" / "Dockerfile").read_text()
    listing = (out / "context.txt").read_text()
    assert "Dockerfile" in listing and "requirements.txt" in listing and "(built at build time)" in listing
    plan = json.loads((out / "build.json").read_text())
    assert plan["dry_run"] and plan["sqsh"] == "/fsx/mtk.sqsh" and plan["build_args"] == {"INSTALL_EFA": "0"}
    assert (out / "mtk-megatron.def").is_file() and "set image.sif: /fsx/m.sif" in proc.stdout
    assert "would build" in proc.stdout and "--build-arg INSTALL_EFA=0 -t mtk-megatron:latest" in proc.stdout


def test_user_errors_are_one_clear_line(tmp_path):
    cases = [
        (["--build-arg", "INSTALL_EFAX=0"], "INSTALL_EFAX are not declared in the Dockerfile; valid:"),
        (["--build-arg", "NOEQUALS"], "expected NAME=VALUE"),
        (["--push"], "--push needs a registry: set image.registry or pass --registry HOST"),
        (["--sqsh"], "--sqsh needs a PATH, or set image.sqsh in the job spec"),
        (["--set", "image.tag=bad tag"], "image.tag"),
    ]
    for extra, message in cases:
        proc = mtk("build-image", JOB, "--dry-run", "--out", str(tmp_path), *extra)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)  # bad input, every one
        assert "Traceback" not in proc.stderr


def test_no_daemon_is_a_clear_error(tmp_path):
    """Set-up, not a failed build: exit 2, the address tried and how to point elsewhere."""
    proc = mtk("build-image", JOB, "--out", str(tmp_path))
    assert proc.returncode == 2 and "cannot reach the Docker daemon" in proc.stderr and "DOCKER_HOST" in proc.stderr
    assert "unix:///nonexistent/docker.sock" in proc.stderr
    assert "Traceback" not in proc.stderr
