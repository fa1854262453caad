"""mtk.processes reads a process's state as psutil would, from /proc/<pid>/stat, in the plain CLI install too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from mtk.processes import alive, state


def test_a_command_name_with_brackets_and_a_z_is_read_after_its_last_bracket(tmp_path):
    """The command name sits in the stat line's brackets and may itself hold ') Z (': the state comes after the
    last ')', so a sleeping process so named is alive, not a zombie."""
    sleeper = tmp_path / "x) Z (y"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", sleeper)
    proc = subprocess.Popen([str(sleeper), "60"])
    try:
        deadline = time.time() + 60  # only fails a hung test
        while state(proc.pid) not in ("S", "R"):
            assert time.time() < deadline, state(proc.pid)
            time.sleep(0.02)
        with open(f"/proc/{proc.pid}/stat") as fh:
            assert "(x) Z (y)" in fh.read()  # the name the kernel reports is the crafted one
        assert alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not alive(proc.pid)  # reaped: no such process


def test_a_zombie_and_impossible_pids_run_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.time() + 60
        while state(child.pid) != "Z":
            assert time.time() < deadline, "the child never exited"
            time.sleep(0.02)
        os.kill(child.pid, 0)  # signal 0 still reaches it ...
        assert not alive(child.pid)  # ... but it runs nothing
    finally:
        child.wait()
    assert alive(os.getpid()) and alive(1)  # pid 1 may be another user's: refused, not missing
    assert not alive(0) and not alive(-5) and state(0) == ""
