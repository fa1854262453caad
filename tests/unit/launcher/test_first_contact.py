"""Issue #37, first contact: what a new user meets with the README's own commands, through the real CLI.

A missing optional library is one line naming its extra (exit 2); the backend follows the spec's cluster block;
an estimate over the GPU's memory is refused with the levers; every enumerated option suggests; the run-name
error shows a valid name; verbs without runs exit 2; --set refuses to replace a section; unverified downloads
are refused (plain HTTP) or warned (https); a launch that reaches no Slurm writes no run dir.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
TINY = str(EXAMPLES / "tiny.yaml")
SEED = str(EXAMPLES / "seed-multinode.yaml")
# The CLI with some libraries hidden from the import system, as if not installed (sys.modules[name] = None).
HIDING = ("import sys\n"
          "for name in sys.argv[1].split(','):\n"
          "    sys.modules[name] = None\n"
          "from mtk.launcher.cli import main\n"
          "sys.exit(main(sys.argv[2:]))\n")


def mtk(*args: str, cwd: Path | None = None, hide: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", HIDING, hide, *args] if hide else [sys.executable, "-m", "mtk", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def errors(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


# ---- case 1: a verb whose optional library is missing ---------------------------------------------------------

def test_build_image_without_the_docker_sdk_is_one_line_naming_the_extra(tmp_path):
    proc = mtk("build-image", TINY, "--out", str(tmp_path / "out"), hide="docker")
    assert proc.returncode == 2, proc.stderr
    assert errors(proc) == proc.stderr.splitlines()[-1:]
    assert "mtk build-image needs the Docker SDK (docker)" in proc.stderr
    assert "pip install 'mtk[image]'" in proc.stderr


def test_eks_launch_without_the_kubernetes_client_is_one_line_naming_the_extra(tmp_path):
    proc = mtk("launch", TINY, "--backend", "eks", "--no-megatron-check", "--set", "image.registry=r.example",
               "--set", "cluster.runs_dir=/fsx/runs", "--set", "data.dir=/fsx/data", cwd=tmp_path, hide="kubernetes")
    assert proc.returncode == 2, proc.stderr
    found = errors(proc)
    assert len(found) == 1 and found[0] == proc.stderr.splitlines()[-1]
    assert "needs the Kubernetes client (kubernetes)" in found[0] and "pip install 'mtk[eks]'" in found[0]
    assert not (tmp_path / "runs").exists(), "a launch that could not submit left a run record"


def test_a_missing_optional_library_anywhere_is_bad_set_up_not_a_bug():
    """The error boundary's safety net: an optional library's ModuleNotFoundError is exit 2 with the install
    command; one of mtk's own modules missing stays an internal error (a bug someone must see)."""
    from mtk.failures import classify

    code, message = classify(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"))
    assert code == 2 and "pip install 'mtk[report]'" in message
    assert classify(ModuleNotFoundError("No module named 'mtk.nowhere'", name="mtk.nowhere")) is None


# ---- case 5: the backend follows the spec's cluster block -----------------------------------------------------

@pytest.mark.parametrize(("example", "backend"), [("gpt-7.5b-p5-slurm.yaml", "slurm"), ("gpt-7.5b-p5-eks.yaml", "eks"),
                                                  ("seed-multinode.yaml", "slurm"), ("tiny.yaml", None)])
def test_validate_without_backend_infers_it_from_the_cluster_block(example, backend):
    proc = mtk("validate", str(EXAMPLES / example), "--no-megatron", "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("ok")
    if backend:
        assert f"backend: {backend} (the spec's cluster.{backend} block" in proc.stdout
    else:
        assert "backend:" not in proc.stdout  # no block: the default (local), said nowhere


def test_a_spec_with_two_backend_blocks_names_the_choice():
    proc = mtk("validate", str(EXAMPLES / "gpt-7.5b-p5-eks.yaml"), "--set", "cluster.slurm.time=10", "--no-megatron")
    assert proc.returncode == 2
    assert "choose one: --backend slurm|eks" in proc.stderr and "cluster:" in proc.stderr


def test_launch_dry_run_without_backend_renders_for_the_cluster_block(tmp_path):
    proc = mtk("launch", str(EXAMPLES / "gpt-7.5b-p5-slurm.yaml"), "--dry-run", "--no-megatron-check", "--out",
               str(tmp_path / "preview"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "backend: slurm" in proc.stdout
    assert (tmp_path / "preview" / "train.sbatch").is_file()


# ---- case 8: an estimate over the GPU's memory ----------------------------------------------------------------

def test_an_estimate_over_the_gpus_memory_is_refused_naming_the_levers():
    """The seed's original settings on an H100 (p5): ~111.8 GiB of weights, grads, optimizer and activations."""
    proc = mtk("validate", SEED, "--no-megatron", "--set", "cluster.instance_type=p5.48xlarge",
               "--set", "cluster.gpu_memory_gib=null", "--set", "parallel.distributed_optimizer=false",
               "--set", "train.recompute=selective")
    assert proc.returncode == 2
    found = errors(proc)
    assert found == ["error: invalid job spec in " + SEED + ":"]
    assert "cluster.instance_type (got 'p5.48xlarge'): the estimate per GPU is 111.77 GiB" in proc.stderr
    assert "79.6 GiB of one GPU (p5.48xlarge: H100 80GB)" in proc.stderr
    for lever in ("parallel.distributed_optimizer: true", "parallel.tp", "parallel.pp", "train.recompute: full",
                  "cluster.allow_memory_overcommit: true"):
        assert lever in proc.stderr, lever


def test_the_override_accepts_an_estimate_over_the_gpus_memory_and_says_so():
    proc = mtk("validate", SEED, "--no-megatron", "-q", "--set", "parallel.distributed_optimizer=false",
               "--set", "train.recompute=selective", "--set", "cluster.allow_memory_overcommit=true")
    assert proc.returncode == 0, proc.stderr
    assert "fits the GPU:            no, accepted by cluster.allow_memory_overcommit: 111.77 of 80.0 GiB" in proc.stdout


def test_spec_guide_names_the_gpu_memory_the_check_uses():
    from mtk.spec.memory_checks import GPU_GIB_BY_FAMILY

    readme = (REPO / "docs" / "spec-guide.md").read_text()
    for family, shown in (("p5", "p5 79.6 GiB"), ("p4d", "p4d 40"), ("p4de", "p4de 80"), ("p5e", "p5e/p5en 140.4"),
                          ("g5", "g5 22.5")):
        assert shown in readme and f"{GPU_GIB_BY_FAMILY[family][0]:g}" in shown, family
    assert "cluster.allow_memory_overcommit: true" in readme


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_gpu_example_fits_its_gpu(example):
    proc = mtk("validate", str(EXAMPLES / example), "--no-megatron", "-q")
    assert proc.returncode == 0, proc.stderr
    if yaml.safe_load((EXAMPLES / example).read_text())["cluster"].get("device", "gpu") == "gpu":
        assert "fits the GPU:            yes: " in proc.stdout, proc.stdout


# ---- case 10: suggestions, examples, exit codes ---------------------------------------------------------------

@pytest.mark.parametrize(("args", "suggestion"), [
    (["validate", TINY, "--backend", "slrum"], "did you mean 'slurm'?"),
    (["report", "--x", "tokns"], "did you mean 'tokens'?"),
    (["convert", "a", "b", "--dtype", "bf16"], "did you mean 'bfloat16'?"),
    (["lanch", TINY], "did you mean 'launch'?"),
])
def test_every_enumerated_option_suggests_the_closest_value(args, suggestion):
    proc = mtk(*args)
    assert proc.returncode == 2 and suggestion in proc.stderr, proc.stderr


@pytest.mark.parametrize(("args", "suggestion"), [
    (["trian"], "unknown step 'trian'; did you mean 'train'?"),
    (["preprocess", "--engine", "hff"], "invalid choice: 'hff'; did you mean 'hf'?"),
    (["doctor", "--device", "gpuu"], "invalid choice: 'gpuu'; did you mean 'gpu'?"),
])
def test_the_entrypoint_steps_suggest_too(args, suggestion):
    proc = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and suggestion in proc.stderr, proc.stderr


def test_the_run_name_error_shows_a_valid_name_not_a_regex():
    proc = mtk("validate", TINY, "--set", "name=My_Run.v2", "--no-megatron")
    assert proc.returncode == 2
    assert "e.g. name: my-run-v2" in proc.stderr and "[a-z0-9]" not in proc.stderr
    assert mtk("validate", TINY, "--set", "name=my-run-v2", "--no-megatron", "-q").returncode == 0


@pytest.mark.parametrize("verb", ["status", "logs", "cancel", "report", "save", "stop"])
def test_a_verb_with_no_runs_exits_2_as_bad_input(verb, tmp_path):
    proc = mtk(verb, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    found = errors(proc)
    assert len(found) == 1 and found[0].startswith("error: no runs under runs/") and "--runs-dir" in found[0]


# ---- case 11: --set over a whole section; unverified downloads ------------------------------------------------

def test_set_replacing_a_whole_section_is_refused_with_the_dotted_form():
    proc = mtk("validate", TINY, "--set", "train={iterations: 5}", "--no-megatron")
    assert proc.returncode == 2
    assert "would replace all of train, silently dropping train.micro_batch_size" in proc.stderr
    assert "--set train.iterations=5" in proc.stderr
    ok = mtk("validate", TINY, "--set", "train.iterations=5", "--set", "data.blend.0={prefix: a/b, weight: 1}",
             "--set", "cluster.env={OMP_NUM_THREADS: '1'}", "--no-megatron", "-q")
    assert ok.returncode == 0, ok.stderr  # a new list item and a section the spec left unset drop nothing


def test_a_plain_http_download_without_sha256_is_refused_with_the_fix():
    proc = mtk("validate", TINY, "--set", "data.fetch=[{url: 'http://mirror.example/vocab.json'}]", "--no-megatron")
    assert proc.returncode == 2
    assert "data.fetch.0.url" in proc.stderr and "plain HTTP without sha256" in proc.stderr
    assert "Use https://, or set sha256" in proc.stderr
    pinned = mtk("validate", TINY, "--no-megatron", "-q", "--set",
                 f"data.fetch=[{{url: 'http://mirror.example/vocab.json', sha256: '{'a' * 64}'}}]")
    assert pinned.returncode == 0, pinned.stderr


def test_an_https_download_without_sha256_is_warned_at_validate_and_launch(tmp_path):
    sets = ["--set", "data.fetch=[{url: 'https://example.com/corpus.jsonl.gz'}]"]
    validate = mtk("validate", TINY, *sets, "--no-megatron", "-q")
    launch = mtk("launch", TINY, *sets, "--dry-run", "--out", str(tmp_path / "p"), cwd=tmp_path)
    for proc in (validate, launch):
        assert proc.returncode == 0, proc.stderr
        warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: data.fetch.0")]
        assert len(warning) == 1 and "has no sha256" in warning[0] and "add sha256:" in warning[0]
        assert "corpus.jsonl.mtk-fetch.json" in warning[0]


# ---- case 1: a verb that cannot reach its cluster -------------------------------------------------------------

def test_a_slurm_launch_without_sbatch_on_path_names_path_and_writes_no_run(tmp_path):
    proc = mtk("launch", SEED, "--no-megatron-check", cwd=tmp_path, env={"PATH": str(Path(sys.executable).parent)})
    assert proc.returncode == 2, proc.stderr
    found = errors(proc)
    assert len(found) == 1 and f"sbatch not found on PATH ({Path(sys.executable).parent})" in found[0]
    assert "--dry-run" in found[0]
    assert not (tmp_path / "runs").exists()
