"""The sbatch renderer: what each script asks Slurm for, that every variant is valid bash with no shellcheck
findings, that render is pure and deterministic, and that bad slurm settings fail naming the field."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mtk.launcher.paths import resolve_paths
from mtk.slurm.render import SCRIPTS, plan, render
from support.sbatch import directives

from mtk.spec import SpecError, load_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "/shared/runs/r1"
TINY = ["cluster.nodes=2", "cluster.procs_per_node=1", "cluster.slurm.runtime=bare"]


def job_of(example: str = "tiny-slurm.yaml", sets: list[str] | None = None):
    job = load_job(EXAMPLES / example, sets or [], backend="slurm")
    return resolve_paths(job, "slurm", cwd="/shared")




VARIANTS = {
    "tiny-slurm": ("tiny-slurm.yaml", []),
    "seed": ("seed-multinode.yaml", []),
    "p5-pyxis": ("gpt-7.5b-p5-slurm.yaml", []),
    "conda+singleton": ("seed-multinode.yaml", ["cluster.slurm.conda_env=megatron", "cluster.slurm.singleton=true",
                                                "cluster.slurm.rdzv_port=29500"]),
    "nsys+extra": ("gpt-7.5b-p5-slurm.yaml", ["debug.nsys.enabled=true", "debug.nsys.ranks=[0,9]",
                                              "cluster.slurm.extra_sbatch={constraint: h100, comment: 'a b#c'}",
                                              "cluster.slurm.partition=gpu", "cluster.slurm.account=proj1",
                                              "cluster.slurm.qos=high", "cluster.slurm.mem='200G'",
                                              "cluster.slurm.requeue=false", "cluster.slurm.signal_lead=0"]),
    "tiny-local-as-slurm": ("tiny.yaml", ["cluster.slurm.runtime=bare"]),
    "gres+no-hyperpod": ("gpt-7.5b-p5-slurm.yaml", ["cluster.slurm.gpu_request=gres",
                                                    "cluster.slurm.hyperpod_auto_resume=false"]),
    "spare": ("seed-multinode.yaml", ["cluster.nodes=2:3", "train.global_batch_size=12",
                                      "cluster.slurm.singleton=true"]),
    "spare-no-preflight": ("seed-multinode.yaml", ["cluster.nodes=2:3", "train.global_batch_size=12",
                                                   "resilience.preflight.enabled=false"]),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, str]]:
    return {name: render(job_of(ex, sets), RUN).files for name, (ex, sets) in VARIANTS.items()}


def test_every_script_passes_bash_n_and_shellcheck(rendered, tmp_path):
    assert shutil.which("shellcheck"), "install the Debian package shellcheck"
    paths = []
    for name, files in rendered.items():
        for rel, text in files.items():
            if rel.endswith(".sbatch"):
                path = tmp_path / f"{name}-{rel}"
                path.write_text(text)
                paths.append(path)
                syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
                assert syntax.returncode == 0, f"{path.name}: {syntax.stderr}"
    assert len(paths) >= 9
    check = subprocess.run(["shellcheck", "--severity=style", *map(str, paths)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_only_the_steps_the_spec_needs(rendered):
    assert sorted(k for k in rendered["seed"] if k.endswith(".sbatch")) == ["train.sbatch"]
    assert sorted(k for k in rendered["tiny-slurm"] if k.endswith(".sbatch")) == ["preprocess.sbatch", "train.sbatch"]
    assert sorted(k for k in rendered["p5-pyxis"] if k.endswith(".sbatch")) == sorted(SCRIPTS.values())
    assert rendered["seed"]["job.json"] == job_of("seed-multinode.yaml").to_json()


def test_submit_commands_chain_with_afterok():
    arts = render(job_of("gpt-7.5b-p5-slurm.yaml"), RUN)
    assert arts.commands == [
        ["sbatch", "--parsable", f"{RUN}/getdata.sbatch"],
        ["sbatch", "--parsable", "--dependency=afterok:<job id of getdata>", "--kill-on-invalid-dep=yes",
         f"{RUN}/preprocess.sbatch"],
        ["sbatch", "--parsable", "--dependency=afterok:<job id of preprocess>", "--kill-on-invalid-dep=yes",
         f"{RUN}/train.sbatch"],
    ]
    assert arts.modes["train.sbatch"] == 0o755


def test_train_directives(rendered):
    d = directives(rendered["p5-pyxis"]["train.sbatch"])
    # gpu_request auto (the default): no GPU directive in the file, mtk launch decides (test_slurm_cluster_parity)
    assert d["nodes"] == ["2"] and d["ntasks-per-node"] == ["1"] and "gpus-per-node" not in d
    assert d["wait-all-nodes"] == ["1"]
    assert d["signal"] == ["B:USR2@600"] and "requeue" in d and "exclusive" in d
    assert d["output"] == [f"{RUN}/logs/train-%j.out"] == d["error"]
    assert d["open-mode"] == ["append"]  # a requeued job appends to the same log
    assert d["job-name"] == ["r1-train"] and d["time"] == ["1-00:00:00"]
    data = directives(rendered["p5-pyxis"]["preprocess.sbatch"])
    assert data["nodes"] == ["1"] and "gpus-per-node" not in data and "signal" not in data


def test_optional_directives_and_extra_sbatch(rendered):
    d = directives(rendered["nsys+extra"]["train.sbatch"])
    assert d["partition"] == ["gpu"] and d["account"] == ["proj1"] and d["qos"] == ["high"] and d["mem"] == ["200G"]
    assert d["constraint"] == ["h100"] and d["comment"] == ["a b#c"]
    assert "no-requeue" in d and "requeue" not in d and "signal" not in d
    cpu = directives(rendered["tiny-slurm"]["train.sbatch"])
    assert "gpus-per-node" not in cpu and "exclusive" not in cpu and cpu["cpus-per-task"] == ["1"]


def test_pyxis_srun_has_container_flags_and_preflight(rendered):
    text = rendered["p5-pyxis"]["train.sbatch"]
    assert "--container-image=/fsx/images/mtk-megatron+latest.sqsh" in text
    mounts = next(line for line in text.splitlines() if "--container-mounts=" in line).split("=", 1)[1]
    assert mounts.split(",")[:2] == ["/fsx/data:/fsx/data", f"{RUN}:{RUN}"]
    assert "/fsx/runs/gpt-7-5b-p5/checkpoints:/fsx/runs/gpt-7-5b-p5/checkpoints" in mounts
    assert f"--container-workdir={RUN}" in text
    assert "has no --container-image option" in text
    assert "--container-image" not in rendered["tiny-slurm"]["train.sbatch"]


def test_network_env_is_exported(rendered):
    text = rendered["p5-pyxis"]["train.sbatch"]
    assert "\nexport FI_PROVIDER=efa\n" in text and "\nexport FI_EFA_USE_DEVICE_RDMA=1\n" in text
    assert "\nexport OMP_NUM_THREADS=1\n" in rendered["tiny-slurm"]["train.sbatch"]


def test_activation_per_runtime(rendered):
    assert '. "$MTK_VENV/bin/activate"' not in rendered["seed"]["train.sbatch"]
    conda = rendered["conda+singleton"]["train.sbatch"]
    assert "export MTK_CONDA_ENV=megatron" in conda and 'conda activate "$MTK_CONDA_ENV"' in conda
    venv = render(job_of("tiny-slurm.yaml", ["cluster.slurm.venv=/shared/venv"]), RUN).files["train.sbatch"]
    assert "export MTK_VENV=/shared/venv" in venv and '. "$MTK_VENV/bin/activate"' in venv


def test_singleton_and_fixed_port(rendered):
    text = rendered["conda+singleton"]["train.sbatch"]
    assert "MTK_SINGLETON=1" in text and "--dependency=singleton" in text and "MTK_RDZV_PORT_FIXED=29500" in text
    assert "--dependency=singleton" not in rendered["seed"]["train.sbatch"]


def test_nsys_wraps_only_nodes_with_profiled_ranks(rendered):
    text = rendered["nsys+extra"]["train.sbatch"]
    assert "export MTK_NSYS_NODES=0,1" in text  # ranks 0 and 9 with 8 per node
    assert "exec nsys profile" in text and "--capture-range=cudaProfilerApi" in text
    assert "nsys" not in rendered["p5-pyxis"]["train.sbatch"]


def test_render_is_deterministic_and_pure(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("render must not start processes")

    monkeypatch.setattr(subprocess, "run", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)
    job = job_of("gpt-7.5b-p5-slurm.yaml")
    before = job.model_dump_json()
    first, second = render(job, RUN), render(job, RUN)
    assert first == second
    assert job.model_dump_json() == before


def test_job_names_are_unique_per_run_dir():
    job = job_of()
    a = {s.job_name for s in plan(job, "/x/runs/tiny-slurm-20260101-000000")}
    b = {s.job_name for s in plan(job, "/x/runs/tiny-slurm-20260101-000001")}
    assert a.isdisjoint(b)
    assert [s.after for s in plan(job, RUN)] == [None, "preprocess"]


@pytest.mark.parametrize(("sets", "field", "words"), [
    (["cluster.slurm.extra_sbatch={partition: x}"], "cluster.slurm.extra_sbatch.partition", "cluster.slurm.partition"),
    (["cluster.slurm.extra_sbatch={contraint: a100}"], "cluster.slurm.extra_sbatch.contraint", "constraint"),
    (["cluster.slurm.extra_sbatch={'--Bad Key': x}"], "cluster.slurm.extra_sbatch.--Bad Key", "long name"),
    (["cluster.slurm.partition=\"a\\nb\""], "cluster.slurm.partition", "line break"),
    (["cluster.slurm.account=\"x\\ry\""], "cluster.slurm.account", "line break"),
    (["debug.nsys.enabled=true", "debug.nsys.ranks=[5]"], "debug.nsys.ranks", "0..1"),
    (["cluster.slurm.venv=/a:b/venv"], "cluster.slurm.venv", "splits PATH"),
])
def test_bad_settings_name_the_field(sets, field, words):
    with pytest.raises(SpecError) as err:
        render(job_of("tiny-slurm.yaml", sets), RUN)
    paths = [p.path for p in err.value.problems]
    assert field in paths, paths
    assert words in str(err.value)


def test_pyxis_needs_absolute_shared_paths():
    job = load_job(EXAMPLES / "gpt-7.5b-p5-slurm.yaml", ["data.dir=data"], backend="slurm")
    with pytest.raises(SpecError) as err:
        render(job, RUN)
    assert [p.path for p in err.value.problems] == ["data.dir"]
    with pytest.raises(SpecError) as err:
        render(job_of("gpt-7.5b-p5-slurm.yaml", ["cluster.slurm.container_mounts=['/a:/b,/c:/d']"]), RUN)
    assert err.value.problems[0].path == "cluster.slurm.container_mounts.0"


def test_relative_run_dir_is_refused():
    with pytest.raises(SpecError, match="absolute"):
        render(job_of(), "runs/r1")


def test_percent_in_run_dir_is_refused():
    # Slurm 22.05 expands '%%j' in an output path to '%<job id>', so no escaping keeps such a path literal.
    with pytest.raises(SpecError, match="expands in log file names"):
        render(job_of(), "/shared/100%/r1")
