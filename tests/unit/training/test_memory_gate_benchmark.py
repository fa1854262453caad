"""The memory-gate benchmark's estimate side (``benchmarks/memory_gate.py`` without ``--measure``, no GPU): one row
per layout, each the estimate validate's gate judges for that job, and full recompute never estimates more."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_estimate_table_has_every_layout_and_matches_the_gate(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory_gate.py"), "--model", "125m,llama-1b",
                           "--micro-batches", "1,4", "--json", str(out), "--work-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert {(r["model"], r["micro_batch"], r["recompute"]) for r in rows} == {
        (m, mb, rc) for m in ("125m", "llama-1b") for mb in (1, 4) for rc in ("none", "full")}
    by = {(r["model"], r["micro_batch"], r["recompute"]): r for r in rows}
    for (model, mb, _), row in by.items():
        assert row["estimate_gib"] == round(row["state_gib"] + row["activation_gib"], 2)
        assert by[(model, mb, "full")]["activation_gib"] < by[(model, mb, "none")]["activation_gib"]
    assert by[("125m", 4, "none")]["activation_gib"] > by[("125m", 1, "none")]["activation_gib"]
    assert len([ln for ln in proc.stdout.splitlines() if "not measured" in ln]) == len(rows)
