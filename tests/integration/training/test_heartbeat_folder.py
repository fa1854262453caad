"""The node-local heartbeat folder another user made first (in /dev/shm, writable by everyone): `mtk-entrypoint
train` ends with one line and exit 2 before any step, every rank together, and leaves that folder alone (before:
each rank's PermissionError traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from mtk.training.heartbeat_files import local_dir

pytestmark = pytest.mark.integration

OTHER_UID = 4242  # another user of the machine (the tests run as root)


def test_a_heartbeat_folder_another_user_took_is_refused_in_one_line(tr, engine_root):
    run = engine_root / "heartbeat-taken"
    tr.make_job(run, "train.iterations=2", "train.lr_warmup_iters=1")
    folder = local_dir(run, socket.gethostname())
    folder.mkdir(mode=0o777)
    os.chown(folder, OTHER_UID, OTHER_UID)
    try:
        proc = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "train", "--job",
                               str(run / "job.json"), "--run-dir", str(run)], cwd=run, env=tr.env(None),
                              capture_output=True, text=True, timeout=tr.RUN_TIMEOUT)
        log = proc.stdout + proc.stderr
        assert proc.returncode == 2, log[-3000:]
        line = f"[mtk] error: node-local heartbeat folder {folder} is a folder of uid {OTHER_UID}"
        assert log.count(line) == 1, log[-3000:]
        assert "Traceback" not in log and "ChildFailedError" not in log, log[-3000:]
        assert "iteration 1" not in log and not (run / "checkpoints").exists(), log[-3000:]
        assert folder.stat().st_uid == OTHER_UID and not any(folder.iterdir())
    finally:
        folder.rmdir()
