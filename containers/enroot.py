"""``--sqsh PATH``: the image as an enroot squashfs for Pyxis (``srun --container-image PATH``).

With enroot installed this runs ``enroot import -o <tmp> dockerd://IMAGE`` and renames the result onto PATH
(an interrupted import never leaves a PATH that looks up to date). Without enroot, a small fallback does what
``enroot import dockerd://`` does: export the container filesystem, write ``/etc/rc``, ``/etc/rc.local``,
``/etc/environment`` and ``/etc/fstab`` from the image config, and ``mksquashfs`` with enroot's options.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from mtk.exitcodes import UserFacingError

Echo = Callable[[str], None]

# enroot's defaults: all files owned by root, lzo (fast to mount and decompress), no duplicate detection.
MKSQUASHFS_OPTIONS = ("-all-root", "-noappend", "-comp", "lzo", "-noD")
INSTALL_HINT = ("enroot is not installed here; install it from https://github.com/NVIDIA/enroot/releases "
                "(Debian/Ubuntu: the enroot and enroot+caps .deb packages; RHEL: the .rpm packages). "
                "Using mtk's enroot-compatible fallback (docker export + mksquashfs).")


class SqshError(UserFacingError, RuntimeError):
    """The .sqsh could not be made (enroot, tar or mksquashfs failed or is missing); the message says which (exit 1)."""


def image_created(client, image: str) -> float:
    """The image's creation time as a Unix timestamp."""
    created = client.api.inspect_image(image)["Created"]
    # Docker prints nanoseconds; fromisoformat wants at most microseconds.
    head, _, frac = created.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00" if frac else f"{head}+00:00")
    return stamp.timestamp()


def up_to_date(path: Path, created: float) -> bool:
    return path.is_file() and path.stat().st_mtime > created


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.stem}.partial{path.suffix or '.sqsh'}")


def make_sqsh(client, image: str, path: Path, echo: Echo, force: bool = False,
              run: Callable[..., Any] = subprocess.run) -> str:
    """Write ``path`` from ``image``; returns what was done: 'skipped', 'enroot' or 'fallback'."""
    path = path.absolute()
    if not force and up_to_date(path, image_created(client, image)):
        echo(f"sqsh: {path} is newer than {image}; skipped (--force to redo)")
        return "skipped"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial(path)
    tmp.unlink(missing_ok=True)  # enroot refuses to overwrite
    try:
        if shutil.which("enroot"):
            argv = ["enroot", "import", "-o", str(tmp), f"dockerd://{image}"]
            echo(f"sqsh: {shlex.join(argv)}")
            proc = run(argv, check=False)
            if proc.returncode != 0 or not tmp.is_file():
                raise SqshError(f"enroot import failed (exit {proc.returncode}); see its output above")
            how = "enroot"
        else:
            echo(f"sqsh: {INSTALL_HINT}")
            fallback_import(client, image, tmp, echo, run=run)
            how = "fallback"
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    echo(f"sqsh: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return how


def rc_script(config: dict[str, Any]) -> str:
    """enroot's ``/etc/rc``: labels as comments, cd to WORKDIR, source rc.local, exec ENTRYPOINT + args/CMD."""
    labels = config.get("Labels") or {}
    entrypoint = list(config.get("Entrypoint") or [])
    cmd = list(config.get("Cmd") or [])
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    workdir = shlex.quote(config.get("WorkingDir") or "/")
    ep, args = shlex.join(entrypoint), shlex.join(cmd)
    lines = [f"# {k} {v}" for k, v in sorted(labels.items())]
    if lines:
        lines.append("")
    lines += [
        f"mkdir -p {workdir} 2> /dev/null",
        f"cd {workdir} && unset OLDPWD || exit 1",
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        "    exec " + " ".join(w for w in (ep, '"$@"') if w),
        "else",
        "    exec " + " ".join(w for w in (ep, args) if w),
        "fi",
    ]
    return "\n".join(lines) + "\n"


def configure_rootfs(rootfs: Path, config: dict[str, Any]) -> None:
    """Write the files enroot reads at start-up from the image's config."""
    etc = rootfs / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "environment").write_text("".join(f"{e}\n" for e in config.get("Env") or []))
    volumes = sorted((config.get("Volumes") or {}).keys())
    (etc / "fstab").write_text("".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                                       for v in volumes))
    (etc / "rc").write_text(rc_script(config))
    (etc / "rc.local").write_text("# Sourced by /etc/rc when the container starts (enroot convention).\n")
    workdir = (config.get("WorkingDir") or "/").lstrip("/")
    (rootfs / workdir).mkdir(parents=True, exist_ok=True)


def fallback_import(client, image: str, out: Path, echo: Echo, run: Callable[..., Any] = subprocess.run) -> None:
    """``docker create`` + ``docker export | tar -px`` + config files + ``mksquashfs`` (enroot's recipe)."""
    if not shutil.which("mksquashfs"):
        raise SqshError("mksquashfs is missing: apt-get install squashfs-tools (or dnf install squashfs-tools)")
    config = client.api.inspect_image(image)["Config"] or {}
    container = client.api.create_container(image)
    with tempfile.TemporaryDirectory(prefix="mtk-sqsh-", dir=out.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        try:
            echo(f"sqsh: exporting {image}")
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "--warning=no-timestamp", "--anchored",
                                    "--exclude=dev/*", "--exclude=.dockerenv", "-px"], stdin=subprocess.PIPE)
            assert tar.stdin is not None
            try:
                for chunk in client.api.export(container["Id"]):
                    tar.stdin.write(chunk)
            finally:
                tar.stdin.close()
            if tar.wait() != 0:
                raise SqshError(f"extracting the exported filesystem of {image} failed (tar exit {tar.returncode})")
        finally:
            client.api.remove_container(container["Id"], v=True, force=True)
        configure_rootfs(rootfs, config)
        argv = ["mksquashfs", str(rootfs), str(out), *MKSQUASHFS_OPTIONS, "-no-progress", "-quiet"]
        echo(f"sqsh: {shlex.join(argv)}")
        proc = run(argv, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SqshError(f"mksquashfs failed (exit {proc.returncode}): {proc.stderr.strip()}")
