"""`make test`'s two lanes (scripts/test_lanes.py): complementary selections, and one summary line for the suite."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("test_lanes", ROOT / "scripts" / "test_lanes.py")
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)


def test_the_lanes_are_complementary_selections():
    daemons, unit = lanes.LANES["daemons"], lanes.LANES["unit"]
    assert unit == f"not ({daemons})"
    assert lanes.pytest_argv("unit", ["-q"])[-1] == "-q" and "-m" in lanes.pytest_argv("daemons", [])


def test_the_combined_line_adds_both_lanes_and_leaves_deselected_out():
    daemons = "x\n===== 1 failed, 215 passed, 700 deselected, 523 warnings in 2569.95s (0:42:49) =====\n"
    unit = "===== 696 passed, 220 deselected, 25 warnings in 247.52s (0:04:07) =====\nmore\n"
    line = lanes.combined({"daemons": lanes.counts(daemons), "unit": lanes.counts(unit)}, 2580.0)
    assert line.startswith("========== 1 failed, 911 passed, 548 warnings in 2580.00s (two lanes at once: ")
    assert "deselected" not in line
    assert lanes.counts("no summary here") == {}
