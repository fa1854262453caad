"""An output location the launch cannot write is refused by `mtk launch` before anything is submitted, with the
field, the directory and the fix, for the real causes: a directory the launching user may not write (run as an
unprivileged user, since root writes anywhere), a read-only mount and a full filesystem (in a private mount
namespace, so nothing leaks to the host)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TINY = str(Path(__file__).resolve().parents[3] / "examples" / "tiny.yaml")
NOBODY = 65534
# The interpreter lives under /root (mode 0700): the unprivileged user may read and search every directory
# (CAP_DAC_READ_SEARCH) but writes under its own uid, which is what the check is about.
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
LAUNCH = [sys.executable, "-m", "mtk", "launch", TINY, "--no-follow"]


@pytest.fixture
def world():
    """A directory tree outside root's private tmp dir: ``locked`` (root's, 0755) and ``home`` (anyone's)."""
    root = Path(tempfile.mkdtemp(prefix="mtk-unwritable-"))
    root.chmod(0o755)
    (root / "locked").mkdir(mode=0o755)
    (root / "home").mkdir()
    (root / "home").chmod(0o777)
    yield root
    shutil.rmtree(root)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(cwd)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def refused(out: subprocess.CompletedProcess, field: str, *words: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    line = next((ln for ln in out.stderr.splitlines() if ln.strip().startswith(f"- {field} ")), "")
    for word in words:
        assert word in line, (word, out.stderr)


def nothing_launched(root: Path) -> None:
    assert not list(root.rglob("run.json")), list(root.rglob("*"))
    assert not list(root.rglob("job.json")), list(root.rglob("*"))


@pytest.mark.parametrize("field", ["cluster.runs_dir", "train.checkpoint.dir"])
def test_a_directory_the_user_cannot_write_is_refused_at_launch(world, field):
    locked, home = world / "locked", world / "home"
    sets = ["--set", f"cluster.runs_dir={home / 'runs'}", "--set", f"{field}={locked / 'out'}"]
    out = run([*AS_NOBODY, *LAUNCH, *sets], cwd=home)
    refused(out, field, str(locked), "not writable by this user", f"uid {NOBODY}", "write access")
    assert out.stderr.count(str(locked) + " is not writable") == 1  # one cause, one message
    assert sorted(p.name for p in locked.iterdir()) == []
    nothing_launched(world)
    # The check is about this user, not the directory: once it is theirs, the same locations pass it.
    os.chown(locked, NOBODY, NOBODY)
    check = ("import sys; from mtk.spec import load_job; from mtk.launcher.outputs import "
             "check_launch_outputs; job = load_job(sys.argv[1], sys.argv[2:]); "
             "check_launch_outputs(job, 'local', sys.argv[2].split('=', 1)[1] + '/r', False); print('passes')")
    ok = run([*AS_NOBODY, sys.executable, "-c", check, TINY, f"cluster.runs_dir={home / 'runs'}",
              f"{field}={locked / 'out'}"], cwd=home)
    assert ok.returncode == 0 and ok.stdout.strip() == "passes", ok.stderr
    assert sorted(p.name for p in locked.iterdir()) == []  # the probe left nothing behind


def in_private_mounts(setup: str, argv: list[str]) -> list[str]:
    """``argv`` inside a new mount namespace after ``setup`` (mounts vanish with it)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", f'{setup}\nexec "$@"', "sh", *argv]


def test_a_read_only_mount_is_refused_at_launch_as_read_only(world):
    ro = world / "ro"
    ro.mkdir()
    setup = f"mount --bind '{ro}' '{ro}'; mount -o remount,bind,ro '{ro}'"
    sets = ["--set", f"cluster.runs_dir={world / 'home' / 'runs'}", "--set", f"train.checkpoint.dir={ro / 'ckpt'}"]
    out = run(in_private_mounts(setup, [*LAUNCH, *sets]), cwd=world / "home")
    refused(out, "train.checkpoint.dir", str(ro), "read-only filesystem", "writable mount")
    assert "permissions" not in out.stderr  # chmod would not help
    nothing_launched(world)


def test_a_full_filesystem_is_refused_at_launch(world):
    full = world / "full"
    full.mkdir()
    # os.access says yes here: the permission bits allow it, only the first write fails.
    setup = (f"mount -t tmpfs -o size=64k tmpfs '{full}'\n"
             f"dd if=/dev/zero of='{full}/filler' bs=4096 count=64 2>/dev/null || true")
    out = run(in_private_mounts(setup, [*LAUNCH, "--set", f"cluster.runs_dir={full / 'runs'}"]), cwd=world / "home")
    refused(out, "cluster.runs_dir", str(full), "full filesystem", "free space")
    nothing_launched(world)
