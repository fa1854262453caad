"""Summary numbers vs values recomputed here from the records the test wrote; PNGs exist and are PNGs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from mtk.launcher.report import build_report, read_metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the first 8 bytes of every PNG file (its specification, 5.2)

PLOTS = ("loss.png", "lr.png", "grad_norm.png", "throughput.png", "step_time_hist.png")


def _train(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r["kind"] == "train"]


def test_resumed_run_summary_matches_records(resumed_run):
    run_dir, recs = resumed_run
    s = build_report(run_dir, wandb=False)
    train = _train(recs)
    evals = [r for r in recs if r["kind"] == "eval"]

    assert s.final_loss == pytest.approx(train[-1]["lm_loss"])
    assert s.final_eval_loss == pytest.approx(evals[-1]["lm_loss"])
    assert s.final_eval_iteration == evals[-1]["iteration"]
    assert s.median_tokens_per_s == pytest.approx(statistics.median(r["tokens_per_s"] for r in train))
    assert s.median_tflops_per_gpu == pytest.approx(statistics.median(r["tflops_per_gpu"] for r in train))
    # log_interval 1: every iteration logged more than once is one iteration lost.
    iterations = [r["iteration"] for r in train]
    assert s.iterations_lost == len(iterations) - len(set(iterations))
    assert s.restarts == len({r["restart_count"] for r in train}) - 1
    assert s.final_iteration == max(iterations)
    assert s.train_records == len(train) and s.eval_records == len(evals)
    assert s.gpu == "unknown" and s.mfu is None
    assert any("truncated last line" in n for n in s.notes)


def test_report_files_are_written_and_valid(resumed_run):
    run_dir, _ = resumed_run
    s = build_report(run_dir, wandb=False)
    out = run_dir / "report"
    assert sorted(s.plots) == sorted(PLOTS)
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000, name
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["final_loss"] == pytest.approx(s.final_loss)
    assert on_disk["iterations_lost"] == s.iterations_lost
    md = (out / "summary.md").read_text()
    assert "iterations lost to restarts | 7 |" in md and "![loss.png](loss.png)" in md
    assert not list(out.glob(".*.tmp")), "atomic writes left temp files behind"


def test_out_dir_and_no_plots(resumed_run, tmp_path):
    run_dir, _ = resumed_run
    s = build_report(run_dir, tmp_path / "elsewhere", plots=False, wandb=False)
    assert s.plots == []
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["summary.json", "summary.md"]
    assert not (run_dir / "report").exists()


def test_log_interval_restart_counts_iterations_not_records(tmp_path, synth):
    """log_interval 5, checkpoint every 10: crash after logging 25, resume from 20 -> 21..25 redone."""
    recs = [synth.train_record(it, 0) for it in (5, 10, 15, 20, 25)] + [synth.train_record(it, 0) for it in (25, 30)]
    path = synth.write_metrics(tmp_path / "r", recs)
    m = read_metrics(path)
    assert m.log_interval == 5
    assert [(r.previous_iteration, r.resume_iteration) for r in m.restarts] == [(25, 20)]
    assert m.iterations_lost == 25 - 20
    live, superseded = m.timeline()
    assert [r["iteration"] for r in live] == [5, 10, 15, 20, 25, 30]
    assert [r["_line"] for r in superseded] == [5]


def test_two_restarts_and_requeue_without_loss(tmp_path, synth):
    """1..10, resume from 5 -> 6..8, resume from 2 -> 3..12, then a requeue that resumed exactly at 12."""
    its = [(i, 0) for i in range(1, 11)] + [(i, 1) for i in range(6, 9)] + [(i, 2) for i in range(3, 13)]
    its += [(i, 3) for i in range(13, 15)]
    path = synth.write_metrics(tmp_path / "r", [synth.train_record(i, rc) for i, rc in its])
    m = read_metrics(path, log_interval=1)
    computed = sum(1 for _ in its) - len({i for i, _ in its})  # work done minus distinct iterations kept
    assert m.iterations_lost == computed == (10 - 5) + (8 - 2)
    assert len(m.restarts) == 3
    live, superseded = m.timeline()
    assert [r["iteration"] for r in live] == list(range(1, 15))
    assert len(superseded) == computed


def test_missing_keys_nan_and_garbage_are_tolerated(tmp_path, synth):
    recs = [synth.train_record(it, grad_norm=None) for it in range(1, 6)]
    for r in recs:
        del r["step_time_ms"]
    recs[-1]["lm_loss"] = float("nan")
    run_dir = tmp_path / "r"
    path = synth.write_metrics(run_dir, recs)
    path.write_text(path.read_text() + "not json\n[1, 2]\n" + json.dumps({"kind": "eval", "lm_loss": 1.0}) + "\n"
                    + json.dumps(synth.eval_record(5)) + "\n")
    s = build_report(run_dir, wandb=False)
    assert "grad_norm.png" not in s.plots and "step_time_hist.png" not in s.plots
    assert {"loss.png", "lr.png", "throughput.png"} <= set(s.plots)
    assert any("skipped grad_norm.png" in n and "'grad_norm'" in n for n in s.notes)
    assert any("ignored 3 line(s)" in n for n in s.notes)
    assert any("non-finite lm_loss" in n for n in s.notes)
    assert json.loads((run_dir / "report" / "summary.json").read_text())["final_loss"] is None
    assert s.final_eval_loss == pytest.approx(synth.eval_record(5)["lm_loss"])


def test_missing_metrics_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl does not exist"):
        build_report(tmp_path, wandb=False)


def test_matplotlib_missing_still_writes_summary(resumed_run, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    run_dir, _ = resumed_run
    s = build_report(run_dir, wandb=False)
    assert s.plots == [] and any("matplotlib is not installed" in n for n in s.notes)
    assert (run_dir / "report" / "summary.md").is_file()


def _plots_of(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.png"))


def test_empty_file_gives_summary_without_plots(tmp_path, synth):
    run_dir = tmp_path / "r"
    synth.write_metrics(run_dir, [])
    s = build_report(run_dir, wandb=False)
    assert s.final_loss is None and s.final_iteration is None and s.restarts == 0
    assert _plots_of(run_dir / "report") == []
    assert any("no train records" in n for n in s.notes)


def test_eval_before_a_resume_point_is_superseded(resumed_run):
    run_dir, _ = resumed_run
    m = read_metrics(run_dir / "metrics.jsonl")
    kept, dropped = m.eval_timeline()
    # The checkpoint was at 15: the eval at 20 from before the crash was redone; the one at 10 was not.
    assert [r["iteration"] for r in dropped] == [20]
    assert [r["iteration"] for r in kept] == [10, 20, 30]
    assert kept[1]["restart_count"] == 1


def test_report_says_how_the_run_counted_flops(tmp_path, synth):
    """mtk counts as Megatron-LM (causal attention) and says so; records from before that say full attention, and a
    run whose records mix the two gets a note."""
    from mtk.launcher.report.summary import flops_convention, rows

    from tests.unit.report.conftest import train_record

    new = [train_record(i) for i in range(1, 4)]
    old = [{k: v for k, v in train_record(i).items() if k != "flops_convention"} for i in range(1, 4)]
    assert flops_convention(new) == ("Megatron-LM's num_floating_point_operations (causal attention)", None)
    assert flops_convention(old)[0].startswith("full attention") and flops_convention(old)[1] is None
    label, note = flops_convention(old + new)
    assert label == "mixed" and "full attention" in note and "causal" in note
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old + new))
    s = build_report(run_dir, wandb=False, plots=False)
    assert s.flops_convention == "mixed" and any("different conventions" in n for n in s.notes)
    assert ("TFLOP/s counted as", "mixed") in rows(s)
