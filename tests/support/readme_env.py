"""The README's own environment for journeys: a fresh clone of this repository and ``make demo`` run in it, with a
venv of its own built from ``requirements/demo.lock`` — not the test environment — and a shell with no trace of
this checkout. Why shared (``readme_env`` in tests/journeys/conftest.py): building it is the expensive part of
every journey that starts as a new user does, and CI has minutes, not a venv per journey, to spare."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ReadmeEnv:
    """Where the README's set-up left things."""

    clone: Path  # the fresh clone `make demo` ran in (the demo venv's `mtk` is installed from it, editable)
    venv: Path  # the demo venv (`make demo VENV=...`)
    env: dict[str, str]  # the user's shell: the machine's, minus this checkout's venv and PYTHONPATH
    demo: str  # what `make demo` printed

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def run(step: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 1200,
        expect: int | None = 0) -> subprocess.CompletedProcess:
    """``args`` as the user types them; fails naming ``step`` when the exit status is not ``expect`` (None: any)."""
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert expect is None or out.returncode == expect, (
        f"step {step!r}: {' '.join(args)} exited {out.returncode}, not {expect}\n"
        f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def sh(step: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 1200) -> str:
    """``args`` must succeed; returns stdout + stderr."""
    out = run(step, args, cwd, env, timeout)
    return out.stdout + out.stderr


def user_shell() -> dict[str, str]:
    """The machine's environment without this checkout's venv on PATH, VIRTUAL_ENV or PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not p.startswith(str(ROOT)))
    env["UV_LINK_MODE"] = "hardlink"  # with the machine's uv cache: the demo venv in seconds, same contents
    return env


def fresh_machine(env: dict[str, str], tmp: Path, index: str) -> dict[str, str]:
    """``env`` as on a fresh Debian box: no local wheel folder, no pip settings pointing at one, an empty user
    cache, and PyTorch's CPU index at ``index`` (a stand-in: this machine reaches no other index)."""
    env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    return {**env, "MTK_WHEELS": str(tmp / "no-wheel-folder"), "PIP_CONFIG_FILE": os.devnull,
            "XDG_CACHE_HOME": str(tmp / "cache"), "MTK_TORCH_INDEX": index}


def readme_clone(tmp: Path) -> ReadmeEnv:
    """A fresh clone of this repository's committed tree under ``tmp``, then ``make demo`` with its own venv, on
    what a fresh machine has: no local torch wheel folder, so torch comes from (a stand-in of) PyTorch's index."""
    from support.torch_index import torch_index

    clone, venv, env = tmp / "mtk", tmp / "demo-venv", user_shell()
    sh("git clone", ["git", "clone", "--quiet", str(ROOT), str(clone)], tmp, env)
    with torch_index(tmp / "torch-index") as index:
        demo = sh("make demo", ["make", "demo", f"VENV={venv}"], clone, fresh_machine(env, tmp, index))
    return ReadmeEnv(clone, venv, env, demo)
