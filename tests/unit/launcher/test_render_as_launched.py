"""``mtk render --out DIR`` writes what ``mtk launch`` would submit (#46): the names and paths in the files come
from the spec (runs_dir, name), DIR only says where the files go.

What may differ between a render and a launch's files is the run dir's time stamp and nothing else: both pick
``<runs_dir>/<name>-<UTC YYYYmmdd-HHMMSS>`` when they run, so the leaf of the run dir (and the EKS run id made from
it, the same leaf in DNS-1035 form) is substituted before the files are compared byte for byte. With the same
``--run-dir`` nothing is substituted at all.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mtk.k8s.names import run_id

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# (example, backend, --set): Slurm and EKS, the examples' own paths (runs_dir /fsx/runs on both)
CASES = [("gpt-7.5b-p5-slurm.yaml", "slurm", []),
         ("gpt-7.5b-p5-eks.yaml", "eks", []),
         ("tiny.yaml", "eks", ["image.registry=r.example", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data",
                               "cluster.eks.rendezvous=etcd"])]
STAMP = r"\d{8}-\d{6}"


def _mtk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _launch_and_render(tmp_path: Path, example: str, backend: str, sets: list[str], *extra: str):
    args = [str(EXAMPLES / example), "--backend", backend, *(a for s in sets for a in ("--set", s)), *extra]
    launched = _mtk("launch", *args, "--dry-run", "--no-megatron-check", "--out", str(tmp_path / "preview"),
                    cwd=tmp_path)
    rendered = _mtk("render", *args, "--out", str(tmp_path / "elsewhere" / "out"), cwd=tmp_path)
    launch_dir = re.search(r"^run dir: (\S+)$", launched.stdout, re.M)[1]  # type: ignore[index]
    render_dir = re.search(r"^run dir: (\S+) \(the files name it", rendered.stderr, re.M)[1]  # type: ignore[index]
    return (launch_dir, _files(tmp_path / "preview")), (render_dir, _files(tmp_path / "elsewhere" / "out"))


@pytest.mark.parametrize(("example", "backend", "sets"), CASES, ids=[f"{e}-{b}" for e, b, _ in CASES])
def test_render_out_is_what_launch_submits_but_the_time_stamp(tmp_path, example, backend, sets):
    (launch_dir, launched), (render_dir, rendered) = _launch_and_render(tmp_path, example, backend, sets)
    # Both the spec's run dir: <runs_dir>/<name>-<stamp>, never the --out folder.
    name = re.escape(json.loads(rendered["job.json"])["name"])
    for run_dir in (launch_dir, render_dir):
        assert re.fullmatch(rf"/fsx/runs/{name}-{STAMP}", run_dir), run_dir
    assert Path(launch_dir).parent == Path(render_dir).parent
    assert sorted(launched) == sorted(rendered)
    assert "megatron_lm_args.txt" in rendered  # the Megatron-LM arguments the run starts as
    old, new = Path(launch_dir).name, Path(render_dir).name
    for rel, data in launched.items():
        text = data.decode().replace(old, new).replace(run_id(old), run_id(new))
        assert text.encode() == rendered[rel], f"{rel} differs beyond the run dir's time stamp"
        assert str(tmp_path) not in rendered[rel].decode(), f"{rel} names the --out folder"
    # What the issue named: the Slurm job name, --output, MTK_RUN_DIR; the EKS object names.
    if backend == "slurm":
        train = rendered["train.sbatch"].decode()
        assert f"#SBATCH --job-name={new}-train" in train and f"--output={render_dir}/logs/train-%j.out" in train
        assert f"MTK_RUN_DIR={render_dir}\n" in train
    else:
        assert f"  name: {run_id(new)}\n" in rendered["manifests/all.yaml"].decode()


def test_the_same_run_dir_gives_the_same_bytes(tmp_path):
    (_, launched), (render_dir, rendered) = _launch_and_render(
        tmp_path, "gpt-7.5b-p5-eks.yaml", "eks", [], "--run-dir", "/fsx/runs/pinned-run")
    assert render_dir == "/fsx/runs/pinned-run" and launched == rendered


def test_render_makes_no_run_dir_and_writes_only_into_out(tmp_path):
    _mtk("render", str(EXAMPLES / "tiny.yaml"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no ./runs/<run>: a render reserves nothing
    plan = (tmp_path / "out" / "steps.json").read_text()  # the local backend's: the spec's runs_dir, resolved here
    assert re.search(rf"{re.escape(str(tmp_path))}/runs/tiny-{STAMP}/", plan) and "/out/" not in plan
