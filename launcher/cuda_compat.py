"""CUDA forward compatibility on nodes whose driver is older than the image's CUDA.

NGC images ship the forward-compatible user-mode driver in ``/usr/local/cuda/compat/lib.real``; NGC's own
entrypoint links it in only when the host driver is older. Pyxis/enroot and Kubernetes with mtk's ENTRYPOINT never
run that entrypoint, so on an AMI with an older driver CUDA init fails. AWS's image puts ``/usr/local/cuda/compat``
on ``LD_LIBRARY_PATH`` unconditionally (aws-samples/awsome-distributed-training 3.test_cases/megatron/megatron-lm/
aws-megatron-lm.Dockerfile); that breaks the other way (a compat libcuda older than the host's kernel module is
refused), so mtk decides per node, as NGC does: the compat directory goes first on the path only when its
libcuda is newer than the running kernel driver. ``mtk-entrypoint`` applies it by re-executing itself once (the
dynamic loader reads LD_LIBRARY_PATH only at start), so every step and every rank torchrun starts inherits it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

COMPAT_DIRS = ("/usr/local/cuda/compat/lib.real", "/usr/local/cuda/compat/lib", "/usr/local/cuda/compat")
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
DONE = "MTK_CUDA_COMPAT"  # set once decided, so the re-executed process does not decide again


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _show(v: tuple[int, ...]) -> str:
    """NVIDIA's spelling: 535.183.01."""
    return ".".join([str(v[0]), *(f"{x:02d}" for x in v[1:])])


def host_driver(version_file: str = DRIVER_VERSION_FILE) -> tuple[int, ...] | None:
    """The loaded kernel driver's version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01 ...")."""
    try:
        text = Path(version_file).read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
    return _version(m.group(1)) if m else None


def compat_driver(dirs: tuple[str, ...] = COMPAT_DIRS) -> tuple[str, tuple[int, ...]] | None:
    """(directory, version) of the first compat directory holding ``libcuda.so.<version>``."""
    for d in dirs:
        for lib in sorted(Path(d).glob("libcuda.so.*.*")) if Path(d).is_dir() else []:
            v = _version(lib.name.removeprefix("libcuda.so."))
            if v:
                return d, v
    return None


def compat_env(env: dict[str, str], version_file: str = DRIVER_VERSION_FILE,
               dirs: tuple[str, ...] = COMPAT_DIRS) -> dict[str, str] | None:
    """The environment with the compat directory first on LD_LIBRARY_PATH, or None when nothing is to change."""
    if env.get(DONE):
        return None
    host, compat = host_driver(version_file), compat_driver(dirs)
    if host is None or compat is None:
        return None
    new = {**env, DONE: "off"}
    if compat[1] > host:
        path = env.get("LD_LIBRARY_PATH", "")
        new[DONE] = f"on: host driver {_show(host)} < compat {_show(compat[1])}"
        new["LD_LIBRARY_PATH"] = compat[0] + (f":{path}" if path else "")
    return new


def reexec_if_needed(argv: list[str]) -> None:
    """Re-execute ``mtk-entrypoint`` with the compat libraries on the path when this node needs them."""
    import sys

    new = compat_env(dict(os.environ))
    if new is None:
        return
    if new[DONE] == "off":
        os.environ[DONE] = "off"
        return
    print(f"mtk: CUDA forward compatibility {new[DONE]}: {new['LD_LIBRARY_PATH'].split(':')[0]} first on "
          "LD_LIBRARY_PATH", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "mtk.launcher.entrypoint", *argv], new)
