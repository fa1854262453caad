"""`mtk report A B`: one overlay PNG (two series, one legend) and a side-by-side table naming both runs."""

from __future__ import annotations

import json
import random

import numpy as np
from click.testing import CliRunner
from mtk.launcher.cli import cli
from PIL import Image

from .conftest import eval_record, train_record, write_metrics

BLUE, ORANGE = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # matplotlib's first two cycle colours


def _run(root, name: str, loss_shift: float, seq_length: int = 64):
    run_dir = root / name
    rng = random.Random(name)
    recs = []
    for it in range(1, 21):
        rec = train_record(it, 0, rng)
        rec["lm_loss"] += loss_shift
        recs.append(rec)
        if it % 10 == 0:
            recs.append(eval_record(it))
    write_metrics(run_dir, recs)
    (run_dir / "job.json").write_text(json.dumps({"name": name, "model": {"seq_length": seq_length},
                                                  "train": {"log_interval": 1}}))
    (run_dir / "run.json").write_text(json.dumps({"backend": "local", "run_dir": str(run_dir), "name": name}))
    return run_dir


def _pixels_of(img: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.all(np.abs(img[:, :, :3].astype(int) - np.array(rgb)) <= 12, axis=-1)


def test_two_runs_overlay_on_shared_axes_with_a_legend_and_a_side_by_side_table(tmp_path):
    a, b = _run(tmp_path, "lr-1e-3", 0.0), _run(tmp_path, "lr-3e-4", 0.4)
    out = tmp_path / "cmp"
    result = CliRunner().invoke(cli, ["report", str(a), str(b), "--out", str(out), "--gpu", "H100", "--no-wandb"])
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[0].split()
    assert header == ["metric", "lr-1e-3", "lr-3e-4"]
    assert "final loss" in result.output and "MFU" in result.output
    md = (out / "compare.md").read_text()
    assert "| metric | lr-1e-3 | lr-3e-4 |" in md
    data = json.loads((out / "compare.json").read_text())
    assert set(data["runs"]) == {"lr-1e-3", "lr-3e-4"} and data["notes"] == []

    img = np.asarray(Image.open(out / "compare.png").convert("RGB"))
    height = img.shape[0]
    legend_band, panels = img[: height // 12], img[height // 12:]
    for color in (BLUE, ORANGE):
        assert _pixels_of(panels, color).sum() > 500, f"series {color} missing from the panels"
        assert _pixels_of(legend_band, color).sum() > 10, f"series {color} missing from the legend"
    assert _pixels_of(img, (0x2C, 0xA0, 0x2C)).sum() == 0  # exactly two series: no third colour drawn


def test_tokens_axis_scales_by_each_runs_sequence_length(tmp_path):
    from mtk.launcher.report.compare import load_run, series

    a = load_run(_run(tmp_path, "short", 0.0, seq_length=64), "short")
    b = load_run(_run(tmp_path, "long", 0.0, seq_length=256), "long")
    xa, _ = series(a, "lm_loss", "tokens")
    xb, _ = series(b, "lm_loss", "tokens")
    assert xa[0] == 8 * 64 and xb[0] == 8 * 256  # consumed_samples (8 per iteration) x seq_length
    assert series(a, "val_loss", "iteration")[0] == [10.0, 20.0]


def test_same_run_twice_is_refused(tmp_path):
    a = _run(tmp_path, "a", 0.0)
    result = CliRunner().invoke(cli, ["report", str(a), str(a), "--no-wandb"])
    assert result.exit_code == 2 and "named twice" in result.output  # bad input (README: exit 2)
