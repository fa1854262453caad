"""Writers into folders other users may write too (a group-writable runs dir, a shared checkpoint or data dir, the
node-local /dev/shm) never write through a link planted there: not at the temp name, not at the target; the
node-local heartbeat folder is this user's or refused in one line, and a killed run's folder is removed at the
next start on the host. Planted files are real symlinks; the other user is a real uid (the tests run as root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mtk.training import heartbeat_files
from mtk.training.hang_monitor import HangMonitor
from mtk.training.heartbeat_files import LocalFolderTaken, local_dir, write_small
from mtk.training.watchdog import Heartbeat

from mtk import files
from mtk.spec.resilience import WatchdogSpec

OTHER_UID = 4242  # another user of the machine
PRECIOUS = "another user's file\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(PRECIOUS)
    return path


@pytest.fixture
def fixed_token(monkeypatch):
    """The first temp name the writers draw is ``.<name>.planted.tmp`` (then random again), so a test can plant
    a link at the very name a writer tries: it must skip it, not follow it."""
    drawn = iter(["planted"])
    real = files.secrets.token_hex
    monkeypatch.setattr(files.secrets, "token_hex", lambda n=None: next(drawn, None) or real(n))


def _plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def test_the_hang_monitors_summary_is_not_written_through_links_at_its_temp_names(tmp_path, victim, fixed_token):
    """The attack of issue 49: a link at the monitor's old fixed temp name (``.<host>.json.<pid>.tmp``) made it
    overwrite the file the link named. Also planted: a link at the first random name it draws."""
    spec = WatchdogSpec(interval=0.05)
    run = tmp_path / "run"
    beat = Heartbeat(run, 0, spec, host="node-w")
    monitor = HangMonitor(run, spec, host="node-w")
    summary = heartbeat_files.node_summary_path(run, "node-w")
    old_fixed = summary.with_name(f".{summary.name}.{os.getpid()}.tmp")
    drawn = summary.with_name(f".{summary.name}.planted.tmp")
    _plant(old_fixed, victim)
    _plant(drawn, victim)
    beat.start()
    try:
        assert monitor.poll() is None
        assert victim.read_text() == PRECIOUS
        assert not summary.is_symlink() and json.loads(summary.read_text())["host"] == "node-w"
        assert drawn.is_symlink() and old_fixed.is_symlink()  # skipped, left alone
    finally:
        beat.stop()
        monitor.stop()


def _replace_with(writer: str, dest: Path) -> None:
    if writer == "write_small":
        write_small(dest, "new\n")
    elif writer == "atomic_write":
        files.atomic_write(dest, "new\n")
    elif writer == "replacing":
        with files.replacing(dest) as fh:
            fh.write(b"new\n")
    else:
        with files.written_by_path(dest) as path:
            path.write_text("new\n")  # as a library writing by path would


@pytest.mark.parametrize("writer", ["write_small", "atomic_write", "replacing", "written_by_path"])
def test_a_link_planted_at_the_target_or_the_temp_name_is_replaced_never_followed(tmp_path, victim, fixed_token,
                                                                                  writer):
    dest = tmp_path / "shared" / "state.json"
    _plant(dest, victim)
    _plant(dest.with_name(f".{dest.name}.planted.tmp"), victim)
    _replace_with(writer, dest)
    assert victim.read_text() == PRECIOUS
    assert not dest.is_symlink() and dest.read_text() == "new\n"
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".") and not p.is_symlink()], \
        "a temp file was left behind"


def test_files_appended_to_replace_a_planted_link_and_never_write_through_it(tmp_path, victim):
    """metrics.jsonl, the saves record, the stack dumps, the step logs, the data dir's lock files."""
    log = tmp_path / "run" / "metrics.jsonl"
    _plant(log, victim)
    with files.open_append(log) as fh:
        fh.write("line\n")
    assert victim.read_text() == PRECIOUS and not log.is_symlink() and log.read_text() == "line\n"
    with files.open_append(log) as fh:  # an ordinary file is appended to
        fh.write("more\n")
    assert log.read_text() == "line\nmore\n"


def test_the_data_dirs_part_and_merged_files_never_follow_planted_links(tmp_path, victim, fixed_token):
    from mtk.data_jobs.indexed import PartFiles, merge_parts, write_part
    from mtk.data_jobs.part_locks import exclusive

    base = tmp_path / "data" / "shard-000000.text"
    part = PartFiles(f"{base}.bin", f"{base}.len", f"{base}.docs")
    Path(part.bin).parent.mkdir(parents=True)
    np.arange(6, dtype=np.uint16).tofile(part.bin)
    out = tmp_path / "data" / "corpus_text_document"
    planted = [Path(f"{part.lengths}.tmp"), Path(f"{part.doc_seqs}.tmp"), Path(part.lengths),  # old fixed temps, target
               Path(f"{out}.bin.tmp"), Path(f"{out}.idx.tmp"), Path(f"{out}.idx"),
               Path(part.lengths).with_name(f".{Path(part.lengths).name}.planted.tmp"),
               Path(f"{out}.mtk-lock")]
    for link in planted:
        _plant(link, victim)
    write_part(part, np.array([2, 4]), np.array([1, 1]))
    assert merge_parts([part], "uint16", f"{out}.bin", f"{out}.idx") == (2, 2)
    with exclusive(f"{out}.mtk-lock"):
        pass
    assert victim.read_text() == PRECIOUS
    for made in (Path(part.lengths), Path(f"{out}.bin"), Path(f"{out}.idx"), Path(f"{out}.mtk-lock")):
        assert made.is_file() and not made.is_symlink(), made
    assert np.fromfile(part.lengths, dtype=np.int32).tolist() == [2, 4]


def test_a_checkpoint_is_private_while_written_and_readable_as_the_umask_says_once_published(tmp_path):
    from mtk.training.checkpoint_layout import publish

    partial = tmp_path / "iter_0000007.partial"
    partial.mkdir(mode=0o700)  # as CheckpointManager.begin makes it
    (partial / "__0_0.distcp").write_bytes(b"x")
    publish(tmp_path, 7)
    umask = files.current_umask()
    assert (tmp_path / "iter_0000007").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "7\n"


# --------------------------------------------------------------------------- the node-local heartbeat folder

def test_the_node_local_folder_is_named_for_this_user(tmp_path):
    assert local_dir(tmp_path, "node-a").name.startswith(f"mtk-heartbeats-{os.getuid()}-")
    assert local_dir(tmp_path, "node-a") != local_dir(tmp_path, "node-b")


def test_a_folder_another_user_made_first_is_refused_in_one_line_and_left_alone(tmp_path):
    beat = Heartbeat(tmp_path / "run", 0, WatchdogSpec(interval=0.05), host="node-taken")
    beat.local.mkdir(mode=0o777)
    os.chown(beat.local, OTHER_UID, OTHER_UID)
    try:
        with pytest.raises(LocalFolderTaken) as refused:
            beat.start()
        line = str(refused.value)
        assert "\n" not in line and str(beat.local) in line and f"uid {OTHER_UID}" in line, line
        assert "resilience.watchdog.enabled: false" in line
        assert beat.local.stat().st_uid == OTHER_UID and not any(beat.local.iterdir())
    finally:
        beat.local.rmdir()


HOLDER = """
import sys, time
from mtk.spec.resilience import WatchdogSpec
from mtk.training.watchdog import Heartbeat
beat = Heartbeat(sys.argv[1], 0, WatchdogSpec(interval=60), host="node-left")
beat.start()
print(beat.local, flush=True)
time.sleep(600)
"""


def _holder(run: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    folder = Path(proc.stdout.readline().strip())  # type: ignore[union-attr]
    assert folder.is_dir() and (folder / "rank0.json").is_file(), folder
    return proc, folder


def test_a_killed_runs_folder_is_removed_at_the_next_start_on_the_host_and_a_live_ones_is_not(tmp_path):
    killed, killed_dir = _holder(tmp_path / "killed")
    live, live_dir = _holder(tmp_path / "live")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed_dir.is_dir(), "SIGKILL ran no cleanup: its folder stays (what the next start removes)"
        # the next start on this host: a new rank process of another run
        nxt, next_dir = _holder(tmp_path / "next")
        try:
            assert not killed_dir.exists(), "the killed run's folder was left in RAM"
            assert live_dir.is_dir() and (live_dir / "rank0.json").is_file(), "a live run's folder was removed"
            assert next_dir.is_dir()
        finally:
            nxt.kill()
            nxt.wait()
    finally:
        live.kill()
        live.wait()
        for folder in (killed_dir, live_dir):
            heartbeat_files.remove_local(folder)
    assert next_dir in heartbeat_files.remove_leftovers() and not next_dir.exists()  # its process ended: unheld
