"""`mtk prune` removes previews and ended runs past an age, and nothing else: a live or unreachable run, a recent
one, and a run dir holding the checkpoint dir a kept run resumes from are kept, each with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mtk.launcher.cli import main
from mtk.launcher.prune import BadDuration, parse_duration, plan
from mtk.launcher.runtable import RunRow

NOW = 10 * 86400.0


def _run(root: Path, name: str, state: str, age_days: float, ckpt: str | None = None) -> RunRow:
    path = root / name
    path.mkdir(parents=True)
    (path / "job.json").write_text(json.dumps({"train": {"checkpoint": {"dir": ckpt}}}))
    return RunRow(name=name, backend="local", state=state, iteration=None, total=None, loss=None,
                  tokens_per_s=None, restarts=0, started=NOW - age_days * 86400, run_dir=str(path))


def test_only_previews_and_old_ended_runs_go(tmp_path):
    rows = [_run(tmp_path, "old-done", "COMPLETED", 9), _run(tmp_path, "old-failed", "FAILED", 8),
            _run(tmp_path, "new-done", "COMPLETED", 1), _run(tmp_path, "live", "RUNNING", 30),
            _run(tmp_path, "unreachable", "UNKNOWN", 30), _run(tmp_path, "preview", "RENDERED", 0)]
    got = {d.row.name: d.remove for d in plan(rows, tmp_path, parse_duration("7d"), True, NOW)}
    assert got == {"old-done": True, "old-failed": True, "new-done": False, "live": False, "unreachable": False,
                   "preview": True}
    no_previews = {d.row.name: d.remove for d in plan(rows, tmp_path, parse_duration("7d"), False, NOW)}
    assert no_previews["preview"] is False


def test_a_checkpoint_dir_a_kept_run_uses_keeps_its_holder(tmp_path):
    holder = _run(tmp_path, "holder", "COMPLETED", 9)  # checkpoints under its own run dir (no dir set)
    user = _run(tmp_path, "user", "RUNNING", 1, ckpt=str(tmp_path / "holder" / "checkpoints"))
    decisions = {d.row.name: d for d in plan([holder, user], tmp_path, parse_duration("7d"), True, NOW)}
    assert not decisions["holder"].remove and "that user uses" in decisions["holder"].why
    alone = {d.row.name: d.remove for d in plan([holder], tmp_path, parse_duration("7d"), True, NOW)}
    assert alone == {"holder": True}  # its own checkpoints go with it when no kept run uses them


def test_durations():
    assert parse_duration("12h") == 43200 and parse_duration("30m") == 1800 and parse_duration("0s") == 0
    with pytest.raises(BadDuration, match="7 days"):
        parse_duration("7 days")


def test_prune_removes_a_preview_only_with_yes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    preview = tmp_path / "runs" / "tiny-20260101-000000"
    preview.mkdir(parents=True)
    (preview / "job.json").write_text(json.dumps({"train": {"iterations": 5, "checkpoint": {"dir": None}}}))
    shared = tmp_path / "runs" / "tiny" / "checkpoints"  # a job name's shared checkpoints: no run, never touched
    shared.mkdir(parents=True)
    assert main(["prune"]) == 0
    assert f"would remove {preview.name}: a preview" in capsys.readouterr().out and preview.is_dir()
    assert main(["prune", "--yes"]) == 0
    assert f"removed {preview.name}" in capsys.readouterr().out
    assert not preview.exists() and shared.is_dir()
    assert main(["prune", "--older-than", "soon"]) == 2


def test_each_run_says_its_age_since_it_started_in_a_unit_that_reads(tmp_path):
    """The help says "started longer ago than this": the reason says "started ... ago" in that sense, in minutes
    for a run of half an hour (not "ended 0 h ago"), in days for an old one."""
    rows = [_run(tmp_path, "recent", "COMPLETED", 0.5 / 24), _run(tmp_path, "hours", "FAILED", 5 / 24),
            _run(tmp_path, "old", "COMPLETED", 9), _run(tmp_path, "just", "STOPPED", 20 / 86400)]
    why = {d.row.name: d.why for d in plan(rows, tmp_path, parse_duration("1h"), True, NOW)}
    assert why == {"recent": "COMPLETED, started 30 min ago: newer than --older-than (1 h)",
                   "hours": "FAILED, started 5 h ago", "old": "COMPLETED, started 9 d ago",
                   "just": "STOPPED, started 20 s ago: newer than --older-than (1 h)"}
    from mtk.launcher.cli.prune import command

    assert "started longer ago than this" in next(p.help for p in command.params if p.name == "older_than")
