"""The CLI starts light, and validate/render/launch --dry-run behave as documented."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
HEAVY = ("torch", "megatron", "docker", "kubernetes", "boto3", "botocore", "pydantic")


def _modules_after(code: str, cwd=None) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=cwd)
    return set(out.stdout.split())


HELP = (
    "from mtk.launcher.cli import cli\n"
    "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass"
)


def test_help_imports_nothing_heavy():
    mods = _modules_after(HELP)
    assert not {m for m in mods if m.split(".")[0] in HEAVY}


# slurm and eks launches have megatron-core build the model first (a child process), local ones do not
@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.megatron),
                                     pytest.param("eks", marks=pytest.mark.megatron)])
def test_dry_run_imports_no_sdk(backend, tmp_path):
    spec = {"local": EXAMPLES / "tiny.yaml"}.get(backend, EXAMPLES / "tiny.yaml")
    sets = []
    if backend == "slurm":
        sets = ["cluster.nodes=2", "cluster.procs_per_node=1", "cluster.slurm.runtime=bare"]
    if backend == "eks":
        sets = ["image.registry=r.example", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data"]
    args = ["launch", str(spec), "--backend", backend, "--dry-run", "--run-dir", str(tmp_path / "run")]
    for s in sets:
        args += ["--set", s]
    code = (
        "from mtk.launcher.cli import cli\ntry:\n"
        f"    cli.main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    mods = _modules_after(code, cwd=tmp_path)
    # Slurm/EKS: the run dir is a cluster path; a dry run previews into ./runs/<run> on this machine.
    local = tmp_path / "run" if backend == "local" else tmp_path / "runs" / "run"
    assert backend == "local" or not (tmp_path / "run").exists()
    assert (local / "job.json").exists(), "dry run wrote no files"
    assert not {m for m in mods if m.split(".")[0] in ("torch", "megatron", "docker", "kubernetes", "boto3")}


@pytest.mark.megatron  # mtk validate builds the model with megatron-core (child)
def test_validate_prints_figures():
    out = subprocess.run(
        [sys.executable, "-m", "mtk", "validate", str(EXAMPLES / "tiny.yaml"), "-q"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "world size:              2" in out.stdout and "data parallel:           1" in out.stdout
    assert "micro-batches per step:  4" in out.stdout
    assert "activations per GPU:" in out.stdout and "recompute none" in out.stdout
    assert "NaN grad check: on" in out.stdout and "recipe: layernorm-1p off" in out.stdout


def test_dry_run_shows_torchrun_and_submits_nothing(tmp_path):
    run = tmp_path / "r"
    out = subprocess.run(
        [sys.executable, "-m", "mtk", "launch", str(EXAMPLES / "tiny.yaml"), "--dry-run", "--run-dir", str(run)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "torchrun --standalone --nnodes 1 --nproc-per-node 2 -m mtk.training.worker" in out.stdout
    assert "dry run: nothing submitted" in out.stdout
    assert not (run / "run.json").exists() and not (run / "state").exists()
    job = json.loads((run / "job.json").read_text())
    assert job["train"]["checkpoint"]["dir"].endswith("/tiny/checkpoints")


def test_render_is_deterministic(tmp_path):
    outs = []
    for i in range(2):
        d = tmp_path / f"o{i}"
        subprocess.run(
            [sys.executable, "-m", "mtk", "render", str(EXAMPLES / "tiny.yaml"), "--out", str(tmp_path / "same"),
             "--run-dir", str(tmp_path / "run")],  # without it, the run dir a launch now would make: time-stamped
            check=True,
            capture_output=True,
            cwd=tmp_path,
        )
        outs.append({p.name: p.read_bytes() for p in (tmp_path / "same").iterdir() if p.is_file()})
        d.mkdir()
    assert outs[0] == outs[1] and outs[0]


@pytest.mark.megatron  # mtk validate builds the model with megatron-core (child)
def test_job_file_defaults_to_mtk_yaml(tmp_path):
    (tmp_path / "mtk.yaml").write_text((EXAMPLES / "tiny.yaml").read_text())
    out = subprocess.run([sys.executable, "-m", "mtk", "validate", "-q"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and "ok" in out.stdout
