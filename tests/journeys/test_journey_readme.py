"""Journey J5 (issue 28): the README's path in the environment the README's commands build. A fresh clone,
`make demo` (its own venv from the lock files, nothing installed by hand), then `mtk ls`, `mtk report` with its
plots and `mtk convert` to a Hugging Face directory that transformers loads. Each assertion names its step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def sh(step: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 1200) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"step {step!r}: {' '.join(args)} exited {out.returncode}\n" \
                                f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def test_readme_journey_clone_demo_ls_report_convert(readme_env, tmp_path):
    # the fresh clone and `make demo` (tests/support/readme_env.py), shared with the newcomer's journey
    clone, venv, env, demo = readme_env.clone, readme_env.venv, readme_env.env, readme_env.demo
    assert "iteration       30/      30" in demo, f"step 'make demo': no final iteration line\n{demo[-3000:]}"
    stages = [line for line in demo.splitlines() if line.startswith("install-deps: [")]
    assert len(stages) == 5, f"step 'make demo': the install names each of its 5 stages\n{demo[:3000]}"
    mtk = str(venv / "bin" / "mtk")

    listed = json.loads(sh("mtk ls", [mtk, "ls", "--json"], clone, env))
    got = [(r["name"].split("-")[0], r["state"], r["iteration"], r["total"]) for r in listed]
    assert got == [("tiny", "COMPLETED", 30, 30)], f"step 'mtk ls': {listed}"
    run_dir = Path(listed[0]["run_dir"])

    report = sh("mtk report", [mtk, "report", str(run_dir)], clone, env)
    assert "plots skipped" not in report, f"step 'mtk report': {report[-2000:]}"
    plots = sorted(p.name for p in (run_dir / "report").glob("*.png"))
    assert plots, f"step 'mtk report': no plots in {run_dir / 'report'}\n{report[-2000:]}"

    hf = tmp_path / "hf"
    sh("mtk convert", [mtk, "convert", str(clone / "runs" / "tiny" / "checkpoints"), str(hf), "--quiet"], clone, env)
    assert (hf / "config.json").exists(), f"step 'mtk convert': {sorted(os.listdir(hf))}"
    load = ("import sys, torch, transformers as t; m = t.AutoModelForCausalLM.from_pretrained(sys.argv[1]); "
            "print(m(torch.tensor([[1, 2, 3]])).logits.shape[-1])")
    rows = subprocess.run([sys.executable, "-c", load, str(hf)], capture_output=True, text=True, timeout=600)
    assert rows.returncode == 0, f"step 'load the HF export': {rows.stderr[-3000:]}"
    assert int(rows.stdout.split()[-1]) >= 1024, f"step 'load the HF export': vocabulary {rows.stdout}"
