"""The preflight's DCGM check in a container, where no host engine runs: it starts nv-hostengine, runs the diag
again and stops the engine. dcgmi and nv-hostengine are stand-in scripts (no DCGM or GPU here) that keep the
real tools' contract: dcgmi cannot connect until an engine runs."""

from __future__ import annotations

from pathlib import Path

from mtk.launcher import preflight

DIAG_FAIL = "|  Memory                   | Fail                                           |\n"


def tools(tmp_path: Path) -> Path:
    bin_dir, marker = tmp_path / "bin", tmp_path / "engine-running"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text(
        f'#!/bin/bash\nif [ ! -f {marker} ]; then echo "Error: unable to connect to host engine. Host engine '
        f'connection invalid/disconnected."; exit 255; fi\nprintf "{DIAG_FAIL}"\nexit 226\n')
    (bin_dir / "nv-hostengine").write_text(
        f'#!/bin/bash\nif [ "$1" = --term ]; then rm -f {marker}; echo term >>{tmp_path}/engine.log; '
        f'else touch {marker}; echo start >>{tmp_path}/engine.log; fi\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def test_dcgm_diag_starts_and_stops_a_host_engine_when_none_runs(tmp_path, monkeypatch):
    bin_dir = tools(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out, started = preflight._dcgm_diag(str(bin_dir / "dcgmi"))
    assert started and preflight.parse_dcgm_diag(out.stdout) == ["Memory"]
    assert (tmp_path / "engine.log").read_text().split() == ["start", "term"]
    assert not (tmp_path / "engine-running").exists()


def test_a_running_engine_is_left_alone(tmp_path, monkeypatch):
    bin_dir = tools(tmp_path)
    (tmp_path / "engine-running").touch()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out, started = preflight._dcgm_diag(str(bin_dir / "dcgmi"))
    assert not started and preflight.parse_dcgm_diag(out.stdout) == ["Memory"]
    assert not (tmp_path / "engine.log").exists()
