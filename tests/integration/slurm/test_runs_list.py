"""`mtk ls` over a runs dir holding real local, Slurm (the two-node test cluster) and EKS-rendered runs, and
every RUN-taking verb defaulting to the newest run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _slurm(harness, stub_venv, name: str, stub: str) -> Path:
    spec = harness.spec(name)
    return harness.launch(spec, f"cluster.slurm.venv={stub_venv}", env={"MTK_STUB": stub})


def test_ls_shows_each_backend_with_its_state_and_verbs_default_to_the_newest(harness, stub_venv):
    runs = harness.root / "runs"
    local = ["--set", f"cluster.runs_dir={runs}", "--set", "train.iterations=5", "--set", "train.eval_interval=null",
             "--set", "train.checkpoint.save_interval=null", "--set", f"data.dir={harness.root / 'data'}"]
    harness.mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "local", *local, timeout=300)
    time.sleep(1.1)  # run dirs are stamped to the second
    done = _slurm(harness, stub_venv, "slurm-done", "exit:0")
    harness.wait_state(done, {"COMPLETED"}, timeout=120)
    failed = _slurm(harness, stub_venv, "slurm-failed", "exit:3")
    harness.wait_state(failed, {"FAILED"}, timeout=120)
    harness.mtk("launch", str(REPO / "examples" / "tiny.yaml"), "--backend", "eks", "--dry-run",
                "--set", "image.registry=123456789012.dkr.ecr.us-west-2.amazonaws.com",
                "--set", "cluster.runs_dir=/fsx/runs", "--set", "data.dir=/fsx/data")
    time.sleep(1.1)
    running = _slurm(harness, stub_venv, "slurm-running", "sleep:300")
    harness.wait_state(running, {"RUNNING"}, timeout=120)

    rows = json.loads(harness.mtk("ls", "--json", "--all").stdout)
    assert sorted((r["name"].rsplit("-", 2)[0], r["backend"], r["state"]) for r in rows) == [
        ("slurm-done", "slurm", "COMPLETED"), ("slurm-failed", "slurm", "FAILED"),
        ("slurm-running", "slurm", "RUNNING"), ("tiny", "eks", "RENDERED"), ("tiny", "local", "COMPLETED")]
    submitted = json.loads(harness.mtk("ls", "--json").stdout)  # previews only when asked (--all)
    assert [r["name"] for r in submitted] == [r["name"] for r in rows if r["state"] != "RENDERED"]
    assert [r["started"] for r in rows] == sorted((r["started"] for r in rows), reverse=True)  # newest first
    assert Path(rows[0]["run_dir"]) == running
    local_row = next(r for r in rows if r["backend"] == "local")
    assert (local_row["iteration"], local_row["total"], local_row["restarts"]) == (5, 5, 0)
    assert local_row["loss"] > 0 and local_row["tokens_per_s"] > 0
    eks_row = next(r for r in rows if r["backend"] == "eks")
    assert eks_row["state"] == "RENDERED"
    text = harness.mtk("ls").stdout
    assert text.splitlines()[0].split()[:4] == ["NAME", "BACKEND", "STATE", "ITER"]
    assert f"{local_row['name']}" in text and "5/5" in text and "FAILED" in text

    # Every verb without RUN picks the newest run (the running Slurm job) and says so.
    said = f"run: slurm-running ({running})"
    status = harness.mtk("status")
    assert said in status.stderr and "RUNNING" in status.stdout
    assert said in harness.mtk("logs", "--step", "train").stderr
    assert said in harness.mtk("save").stderr and (running / "triggers" / "save").is_file()
    assert said in harness.mtk("stop").stderr and (running / "triggers" / "exit").is_file()
    cancel = harness.mtk("cancel")
    assert said in cancel.stderr and harness.state(running)["state"] == "CANCELLED"
    # report wants figures: it reports the newest run that has train records (the local one) and names each newer
    # run it passed over, with why (#37: a run without figures never shadows the one that trained)
    report = harness.mtk("report", "--no-plots", "--no-wandb", check=False)
    assert report.returncode == 0, report.stderr
    assert f"run: tiny ({local_row['run_dir']})" in report.stderr and "with train records" in report.stderr
    assert f"passing over {running.name}: " in report.stderr

