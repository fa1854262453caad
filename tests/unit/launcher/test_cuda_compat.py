"""CUDA forward compatibility is decided per node as NGC's entrypoint does: the image's compat libcuda goes first on
LD_LIBRARY_PATH only when it is newer than the host's kernel driver (never when older: that would be refused)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mtk.launcher import cuda_compat

NVRM = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Wed Jun 12 22:22:22 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


def node(tmp_path: Path, host: str | None, compat: str | None) -> tuple[str, tuple[str, ...]]:
    version_file = tmp_path / "version"
    if host:
        version_file.write_text(NVRM.format(v=host))
    lib = tmp_path / "compat" / "lib.real"
    lib.mkdir(parents=True)
    if compat:
        (lib / f"libcuda.so.{compat}").write_bytes(b"")
        (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{compat}")
    return str(version_file), (str(lib),)


@pytest.mark.parametrize(("host", "compat", "on"), [
    ("535.183.01", "580.82.07", True),   # AMI driver older than the NGC 25.09 base's CUDA 13: compat needed
    ("580.95.05", "580.82.07", False),   # newer host driver: the host's libcuda serves
    ("580.82.07", "580.82.07", False),
])
def test_compat_first_on_the_path_only_when_the_host_driver_is_older(tmp_path, host, compat, on):
    version_file, dirs = node(tmp_path, host, compat)
    env = cuda_compat.compat_env({"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}, version_file, dirs)
    assert env is not None
    if on:
        assert env["LD_LIBRARY_PATH"] == f"{dirs[0]}:/usr/local/nvidia/lib64"
        assert env[cuda_compat.DONE].startswith(f"on: host driver {host} < compat {compat}")
    else:
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64" and env[cuda_compat.DONE] == "off"


@pytest.mark.parametrize(("host", "compat"), [(None, "580.82.07"), ("535.183.01", None)])
def test_nothing_changes_without_a_gpu_driver_or_a_compat_package(tmp_path, host, compat):
    version_file, dirs = node(tmp_path, host, compat)
    assert cuda_compat.compat_env({}, version_file, dirs) is None


def test_decided_once(tmp_path):
    version_file, dirs = node(tmp_path, "535.183.01", "580.82.07")
    assert cuda_compat.compat_env({cuda_compat.DONE: "off"}, version_file, dirs) is None


def test_the_entrypoint_reexecutes_itself_with_the_compat_path(tmp_path):
    """The real re-exec: mtk-entrypoint doctor --help, with the module's paths pointed at a fake node."""
    version_file, dirs = node(tmp_path, "535.183.01", "580.82.07")
    code = (f"import sys; from mtk.launcher import cuda_compat as c; c.DRIVER_VERSION_FILE = {version_file!r}; "
            f"c.COMPAT_DIRS = {dirs!r}; c.compat_env.__defaults__ = (c.DRIVER_VERSION_FILE, c.COMPAT_DIRS); "
            "import os; os.environ.pop('MTK_CUDA_COMPAT', None); c.reexec_if_needed(['--probe'])")
    probe = tmp_path / "probe.py"
    probe.write_text(code)
    # After execve the child is `python -m mtk.launcher.entrypoint --probe`: an unknown step, said by the new process.
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60)
    assert "CUDA forward compatibility on: host driver 535.183.01 < compat 580.82.07" in out.stderr
    assert "unknown step '--probe'" in out.stderr  # the re-executed entrypoint ran, with the new environment
