"""Issue #26 on Slurm: GPU requests by choice (gres/none/auto), HyperPod auto-resume, --wait-all-nodes and the
sqsh check before any srun — in the rendered files, and (auto) in the argv `mtk launch` submits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths
from mtk.slurm.backend import SlurmBackend
from mtk.slurm.commands import has_gpu_gres
from mtk.slurm.render import HYPERPOD_MARKER, render
from support.sbatch import directives

from mtk.spec import load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "/shared/runs/r1"


def p5(*sets: str):
    return resolve_paths(load_job(EXAMPLES / "gpt-7.5b-p5-slurm.yaml", list(sets), backend="slurm"), "slurm",
                         cwd="/shared")


def train(*sets: str) -> str:
    return render(p5(*sets), RUN).files["train.sbatch"]


@pytest.mark.parametrize(("choice", "in_file"), [("gres", True), ("none", False), ("auto", False)])
def test_gpu_request_choice_decides_the_directive(choice, in_file):
    d = directives(train(f"cluster.slurm.gpu_request={choice}"))
    assert ("gpus-per-node" in d) is in_file
    if in_file:
        assert d["gpus-per-node"] == ["8"]


def test_cpu_jobs_never_ask_for_gpus():
    job = resolve_paths(load_job(EXAMPLES / "tiny-slurm.yaml", ["cluster.slurm.gpu_request=gres"],
                                 backend="slurm"), "slurm", cwd="/shared")
    assert "gpus-per-node" not in directives(render(job, RUN).files["train.sbatch"])


def test_extra_sbatch_cannot_ask_for_gpus_or_wait_behind_the_choice():
    from mtk.spec import SpecError

    for key in ("gpus-per-node", "gpus", "wait-all-nodes"):
        with pytest.raises(SpecError) as err:
            render(p5(f"cluster.slurm.extra_sbatch={{{key}: '1'}}"), RUN)
        assert f"cluster.slurm.extra_sbatch.{key}" in str(err.value)


def test_wait_all_nodes_on_training_only():
    files = render(p5(), RUN).files
    assert directives(files["train.sbatch"])["wait-all-nodes"] == ["1"]
    assert "wait-all-nodes" not in directives(files["getdata.sbatch"])


def test_hyperpod_marker_and_auto_resume_on_the_training_srun_only():
    text = train()
    assert f"MTK_HYPERPOD_MARKER={HYPERPOD_MARKER}\n" in text and HYPERPOD_MARKER == "/opt/sagemaker_cluster"
    srun_lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("srun ")]
    assert len(srun_lines) == 2  # preflight, training
    assert '"${MTK_AUTO_RESUME[@]}"' not in srun_lines[0] and '"${MTK_AUTO_RESUME[@]}"' in srun_lines[1]
    assert "MTK_HYPERPOD_MARKER=''\n" in train("cluster.slurm.hyperpod_auto_resume=false")
    assert "--auto-resume" not in render(p5(), RUN).files["preprocess.sbatch"]


def _run_sqsh_check(tmp_path: Path, image: str) -> subprocess.CompletedProcess:
    """The rendered train script up to its first srun, with Slurm's commands stubbed out of PATH."""
    text = render(p5(f"image.sqsh={image}"), RUN).files["train.sbatch"].replace(RUN, str(tmp_path / "run"))
    head = text.split("\n# Preflight: without Pyxis", 1)[0]
    rest = text.split("\n# Preflight: without Pyxis", 1)[1].split("esac\n", 1)[1]
    head += rest.split('\nif [ -f "$MTK_STATE_DIR/final" ]')[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("scontrol", "scancel", "srun"):
        (bin_dir / tool).write_text(f"#!/bin/bash\necho {tool} \"$@\" >>{tmp_path}/calls\n")
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "head.sh"
    script.write_text(head + "\necho reached-srun\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_NAME": "r1-train"}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)


def test_missing_or_unreadable_sqsh_is_refused_before_any_srun(tmp_path):
    out = _run_sqsh_check(tmp_path, str(tmp_path / "nope.sqsh"))
    assert out.returncode == 2 and "reached-srun" not in out.stdout
    assert "nope.sqsh" in out.stderr and "mtk build-image" in out.stderr
    assert (tmp_path / "run" / "state" / "final").read_text() == "bad-input\n"
    calls = tmp_path / "calls"
    assert not calls.exists() or "srun" not in calls.read_text()


def test_present_sqsh_passes_the_check(tmp_path):
    image = tmp_path / "img.sqsh"
    image.write_bytes(b"hsqs")
    out = _run_sqsh_check(tmp_path, str(image))
    assert out.returncode == 0 and "reached-srun" in out.stdout, out.stderr


def test_registry_images_are_not_checked_as_files():
    assert "MTK_SQSH" not in train("cluster.slurm.container_image=docker://nvcr.io#nvidia/pytorch:25.09-py3")


@pytest.mark.parametrize(("sinfo", "gpus"), [("gpu:8\n", True), ("gpu:h100:8(S:0-1)\n(null)\n", True),
                                             ("(null)\n", False), ("craynetwork:4,gpu:4\n", True),
                                             ("gpumem:1\n", False), ("", False)])
def test_sinfo_gres_parsing(sinfo, gpus):
    assert has_gpu_gres(sinfo) is gpus


class FakeSlurm:
    """Records the argv mtk submits; answers sinfo's GRES question as a cluster with or without GPU GRES."""

    def __init__(self, gres: bool):
        self.gres, self.submitted, self.asked = gres, [], []

    def gpu_gres(self, partition):
        self.asked.append(partition)
        return self.gres

    def submit(self, argv, values=None):
        self.submitted.append(argv)
        return str(len(self.submitted))

    def cancel(self, *a, **k):
        pass


@pytest.mark.parametrize("gres", [True, False])
def test_auto_adds_gpus_per_node_at_submit_only_where_the_partition_has_gpu_gres(tmp_path, gres):
    job = p5("cluster.slurm.partition=p5")
    arts = render(job, str(tmp_path))
    fake = FakeSlurm(gres)
    SlurmBackend(fake).submit(job, arts)  # type: ignore[arg-type]
    train_argv = fake.submitted[-1]
    assert train_argv[-1].endswith("train.sbatch")
    assert ("--gpus-per-node=8" in train_argv) is gres
    assert all("--gpus-per-node=8" not in argv for argv in fake.submitted[:-1])
    assert fake.asked == ["p5"]
    assert any("gpu_request auto" in n for n in arts.notes)


def test_gres_and_none_never_ask_sinfo(tmp_path):
    for choice in ("gres", "none"):
        job = p5(f"cluster.slurm.gpu_request={choice}")
        fake = FakeSlurm(True)
        SlurmBackend(fake).submit(job, render(job, str(tmp_path)))  # type: ignore[arg-type]
        assert fake.asked == [] and all("--gpus-per-node=8" not in a for a in fake.submitted)
