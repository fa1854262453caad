"""Where no local wheel folder holds torch's CPU build, ``scripts/install-deps.sh`` downloads the wheel the lock
pins from PyTorch's CPU index, and only that file: a wheel whose bytes differ from the lock's hash is refused in
one message, and nothing lands in the cache. (The good path is what the README environment of the journeys is
built through: tests/support/readme_env.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.readme_env import fresh_machine, user_shell
from support.torch_index import machine_torch_wheel, torch_index

REPO = Path(__file__).resolve().parents[3]


def test_a_wheel_that_is_not_the_locked_one_is_refused_and_not_cached(tmp_path):
    impostor = tmp_path / "impostor" / machine_torch_wheel().name
    impostor.parent.mkdir()
    impostor.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: a wheel's name, other bytes
    with torch_index(tmp_path / "index", impostor) as index:
        env = fresh_machine(user_shell(), tmp_path, index)
        out = subprocess.run([str(REPO / "scripts" / "install-deps.sh"), "train"], cwd=REPO, text=True,
                             capture_output=True, env={**env, "MTK_VENV": str(tmp_path / "venv")}, timeout=600)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "hash" in out.stderr.lower() and "could not download torch from " + index in out.stderr, out.stderr
    cache = tmp_path / "cache" / "mtk" / "wheels"
    assert not list(cache.glob("*.whl")) and not (cache / ".partial").exists()
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/torch"))  # stopped before installing
