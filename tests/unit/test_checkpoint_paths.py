"""The checkpoint dir's default and the tracker's name have one home (mtk.checkpoint_paths): a launch writes the
default into the job, every reader without a dir falls back to the run's own, and the Slurm step script reads the
tracker by the same name the engine publishes."""

from __future__ import annotations

from pathlib import Path

from mtk.launcher.ckpt_precheck import checkpoint_root
from mtk.launcher.paths import resolve_paths
from mtk.slurm import render as slurm_render
from mtk.training import checkpoint_layout

from mtk import checkpoint_paths
from mtk.spec.loader import load_job

REPO = Path(__file__).resolve().parents[2]


def test_a_launch_sets_the_dir_shared_by_every_run_of_the_job_name():
    job = resolve_paths(load_job(REPO / "examples" / "tiny-slurm.yaml", backend="slurm"), "slurm", cwd="/shared")
    assert job.train.checkpoint.dir == "/shared/runs/tiny-slurm/checkpoints"
    assert job.train.checkpoint.dir == checkpoint_paths.default_dir("/shared/runs/", "tiny-slurm")


def test_without_a_dir_a_job_checkpoints_under_its_own_run_dir():
    job = load_job(REPO / "examples" / "tiny-slurm.yaml", backend="slurm")
    assert job.train.checkpoint.dir is None
    for run_dir in ("/r/run-1", "/r/run-1/", Path("/r/run-1")):
        assert checkpoint_paths.checkpoint_dir(None, run_dir) == "/r/run-1/checkpoints"
    assert checkpoint_paths.checkpoint_dir("/ckpt", "/r/run-1") == "/ckpt"
    assert slurm_render.checkpoint_dir(job, "/r/run-1") == "/r/run-1/checkpoints"
    assert checkpoint_root(job, "/r/run-1") == Path("/r/run-1/checkpoints")


def test_the_step_script_reads_the_tracker_the_engine_publishes():
    step_sh = (REPO / "slurm" / "templates" / "step.sh.j2").read_text()
    assert f'"$MTK_CKPT_DIR/{checkpoint_paths.TRACKER}"' in step_sh
    assert checkpoint_layout.TRACKER == checkpoint_paths.TRACKER == "latest_checkpointed_iteration.txt"
