"""`mtk convert RUN DEST` (issue #37, case 6): a run's name or dir stands for its newest checkpoint, as for the other
verbs; a SOURCE that is neither a directory nor a run says where runs and their checkpoints are looked for.

The checkpoint is real: a tiny GPT-2 written by transformers, imported by `mtk convert` (HF → torch_dist), then
recorded as the checkpoint dir of a run the way `mtk launch` records one (job.json + run.json).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def run_with_checkpoint(tmp_path_factory) -> Path:
    from mtk.launcher.paths import resolve_paths
    from transformers import GPT2Config, GPT2LMHeadModel

    from mtk.runs import Run
    from mtk.spec import load_job

    root = tmp_path_factory.mktemp("convert-by-run")
    GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=128,
                               activation_function="gelu")).save_pretrained(root / "hf")
    imported = mtk("convert", "hf", "elsewhere/checkpoints", "--quiet", cwd=root)
    assert imported.returncode == 0, imported.stderr
    job = load_job(REPO / "examples" / "tiny.yaml", [f"train.checkpoint.dir={root / 'elsewhere' / 'checkpoints'}"],
                   backend="local")
    run_dir = root / "runs" / "tiny-20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "job.json").write_text(resolve_paths(job, "local", cwd=str(root)).to_json())
    Run(backend="local", run_dir=str(run_dir), name="tiny", ids={"train": "1"}).save()
    return root


@pytest.mark.parametrize("ref", ["tiny", "runs/tiny-20260101-000000"], ids=["name", "dir"])
def test_convert_takes_a_run_name_or_dir_and_exports_its_newest_checkpoint(run_with_checkpoint, ref):
    root = run_with_checkpoint
    dest = root / f"hf-from-{ref.replace('/', '-')}"
    out = mtk("convert", ref, str(dest), "--quiet", cwd=root)
    assert out.returncode == 0, out.stderr
    run_dir = root / "runs" / "tiny-20260101-000000"
    assert f"source: {root / 'elsewhere' / 'checkpoints'} (the checkpoints of run tiny, {run_dir})" in out.stderr
    config = json.loads((dest / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["n_layer"] == 2
    assert list(dest.glob("*.safetensors"))


def test_a_source_that_is_no_directory_and_no_run_says_where_runs_are_looked_for(tmp_path):
    out = mtk("convert", "tiny", str(tmp_path / "out"), cwd=tmp_path)
    assert out.returncode == 2
    assert "'tiny' is neither a directory" in out.stderr
    assert f"run names are looked up under {tmp_path / 'runs'}/ (--runs-dir to look elsewhere)" in out.stderr
    assert "train.checkpoint.dir (default <runs_dir>/<name>/checkpoints)" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()


def test_a_run_without_checkpoints_names_its_checkpoint_dir(run_with_checkpoint, tmp_path):
    from mtk.runs import Run

    run_dir = tmp_path / "runs" / "fresh-20260101-000000"
    run_dir.mkdir(parents=True)
    job = json.loads((run_with_checkpoint / "runs" / "tiny-20260101-000000" / "job.json").read_text())
    job["train"]["checkpoint"]["dir"] = str(tmp_path / "not-yet")
    (run_dir / "job.json").write_text(json.dumps(job))
    Run(backend="local", run_dir=str(run_dir), name="fresh").save()
    out = mtk("convert", "fresh", str(tmp_path / "out"), cwd=tmp_path)
    assert out.returncode == 2
    assert f"its checkpoint dir {tmp_path / 'not-yet'} does not exist on this machine" in out.stderr
