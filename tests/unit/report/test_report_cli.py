"""`mtk report` through the real click entry point; the W&B path when wandb is absent."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner
from mtk.launcher.cli import cli
from mtk.launcher.report.records import read_metrics
from mtk.launcher.report.wandb_log import log_to_wandb


def test_cli_prints_summary_and_writes_files(resumed_run):
    run_dir, _ = resumed_run
    result = CliRunner().invoke(cli, ["report", str(run_dir), "--no-wandb", "--gpu", "A100"])
    assert result.exit_code == 0, result.output
    assert "iterations lost to restarts  7" in result.output
    assert "A100 (peak 312 TFLOP/s bf16; from command line)" in result.output
    assert (run_dir / "report" / "loss.png").is_file()


def test_cli_json_and_run_name_lookup(resumed_run):
    run_dir, recs = resumed_run
    (run_dir / "run.json").write_text(json.dumps({"backend": "local", "run_dir": str(run_dir), "name": "tiny"}))
    result = CliRunner().invoke(cli, ["report", "tiny", "--runs-dir", str(run_dir.parent), "--json",
                                      "--no-plots", "--no-wandb"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["final_loss"] == [r for r in recs if r["kind"] == "train"][-1]["lm_loss"]
    assert data["plots"] == []


def test_cli_unknown_run_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nope"), "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "no run" in result.output  # bad input, as README's exit codes say


def test_cli_run_without_metrics(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"backend": "local", "run_dir": str(tmp_path), "name": "x"}))
    result = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert result.exit_code == 1 and "metrics.jsonl does not exist" in result.output


def test_wandb_not_installed_is_a_one_line_note(tmp_path, monkeypatch, synth):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError even if installed
    monkeypatch.setenv("WANDB_MODE", "offline")
    m = read_metrics(synth.write_metrics(tmp_path / "r", synth.resumed_run_records()))
    note = log_to_wandb(m, "tiny", {})
    assert note is not None and "\n" not in note and "wandb is not installed" in note


def test_wandb_unconfigured_never_imports_it(tmp_path, synth):
    """In a fresh interpreter: no WANDB_* env -> silent no-op and wandb never imported."""
    path = synth.write_metrics(tmp_path / "r", synth.resumed_run_records())
    code = ("import sys; from mtk.launcher.report.records import read_metrics; "
            "from mtk.launcher.report.wandb_log import log_to_wandb; "
            f"print(log_to_wandb(read_metrics({str(path)!r}), 'tiny', {{}})); print('wandb' in sys.modules)")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("WANDB_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["None", "False"]


def test_report_verb_keeps_help_light():
    code = ("import sys; from mtk.launcher.cli import main; "
            "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()) as f: main(['--help'])\n"
            "print('report' in f.getvalue(), any(m in sys.modules for m in "
            "('matplotlib', 'torch', 'wandb', 'mtk.launcher.report')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]
