"""``--sif PATH``: an Apptainer definition converted from the rendered Dockerfile with spython, fixed, and
built with ``apptainer build`` when Apptainer is installed.

spython's conversion has known defects that this module repairs:
  * ENV/ARG become bare ``NAME=value`` lines in ``%post``: child processes (pip, apt) never see them -> exported,
    with the build args of this build substituted for the Dockerfile's defaults;
  * every RUN lands in one ``%post`` shell, so ``exit 0`` or ``cd`` in one step leaks into the next -> each
    RUN body runs in its own subshell, as in Docker;
  * an exec-form ENTRYPOINT + CMD is flattened into one unquoted string and CMD is appended even when the
    user passes arguments -> the runscript is regenerated with Docker's semantics and shell quoting;
  * COPY sources stay relative to wherever ``apptainer build`` runs -> made absolute (the build context).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtk.exitcodes import UserFacingError

Echo = Callable[[str], None]
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
INSTALL_HINT = ("apptainer is not installed here; the definition file was written. Build it where Apptainer "
                "runs (https://apptainer.org/docs/admin/main/installation.html): apptainer build {sif} {definition}")


class SifError(UserFacingError, RuntimeError):
    """``apptainer build`` failed; its own output above says why (exit 1)."""


def _logical_instructions(dockerfile: str) -> list[list[str]]:
    """Group physical lines into instructions (continuation lines end with a backslash)."""
    groups: list[list[str]] = []
    current: list[str] = []
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            groups.append([line])
            continue
        current.append(line)
        if not line.rstrip().endswith("\\"):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def prepare_dockerfile(dockerfile: str, context_dir: Path) -> str:
    """Rewrite the Dockerfile so spython's output keeps Docker's semantics (see the module docstring)."""
    out: list[str] = []
    for group in _logical_instructions(dockerfile):
        head = group[0].lstrip()
        keyword = head.split(None, 1)[0].upper() if head and not head.startswith("#") else ""
        if keyword == "RUN" and not head[3:].lstrip().startswith("["):
            group = [f"RUN ( {head[3:].lstrip()}", *group[1:]]
            group[-1] = f"{group[-1]} )"
        elif keyword in ("COPY", "ADD") and len(group) == 1:
            words = head.split()
            flags = [w for w in words[1:] if w.startswith("--")]
            paths = [w for w in words[1:] if not w.startswith("--")]
            sources = [w if w.startswith("/") or "://" in w else str(context_dir / w) for w in paths[:-1]]
            group = [" ".join([keyword, *flags, *sources, paths[-1]])]
        out.extend(group)
    return "\n".join(out) + "\n"


def _sections(text: str) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        if line.startswith("%"):
            sections.append((line, []))
        else:
            sections[-1][1].append(line)
    return sections


def _fix_post(lines: list[str], build_args: dict[str, str]) -> list[str]:
    fixed, continued = [], False
    for line in lines:
        match = None if continued else _ASSIGN.match(line)
        if match:
            name, value = match.groups()
            value = shlex.quote(build_args[name]) if name in build_args else value
            line = f"export {name}={value}"
        fixed.append(line)
        continued = line.rstrip().endswith("\\")
    return fixed


def runscript(entrypoint: list[str], cmd: list[str]) -> list[str]:
    """Docker's rule: arguments replace CMD; ENTRYPOINT stays. Every word shell-quoted."""
    ep = shlex.join(entrypoint)
    default = " ".join(w for w in (ep, shlex.join(cmd)) if w) or "/bin/sh"
    with_args = " ".join(w for w in (ep, '"$@"') if w) if ep else '"$@"'
    return ["if [ $# -gt 0 ]; then", f"    exec {with_args}", "else", f"    exec {default}", "fi"]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else shlex.split(str(value))


def definition(dockerfile: str, context_dir: Path, build_args: dict[str, str] | None = None) -> str:
    """The Apptainer definition for ``dockerfile`` whose build context is ``context_dir``."""
    from mtk.extras import requires

    with requires("image", "mtk build-image --sif"):
        from spython.logger import bot
        from spython.main.parse.parsers import DockerParser
        from spython.main.parse.writers import SingularityWriter

    prepared = prepare_dockerfile(dockerfile, context_dir.absolute())
    level, bot.level = bot.level, -5  # quiet: "file doesn't exist" is about a context built later
    try:
        with tempfile.TemporaryDirectory(prefix="mtk-def-") as tmp:
            path = Path(tmp) / "Dockerfile"
            path.write_text(prepared)
            recipe = DockerParser(str(path)).recipe
            text = SingularityWriter(recipe).convert()
    finally:
        bot.level = level
    stage = next(reversed(recipe.values()))
    run = runscript(_as_list(stage.entrypoint), _as_list(stage.cmd))
    out: list[str] = []
    for header, lines in _sections(text):
        name = header.split()[0] if header else ""
        if name == "%post":
            lines = _fix_post(lines, build_args or {})
        elif name in ("%runscript", "%startscript"):
            lines = list(run)
        if header:
            out.append(header)
        out.extend(lines)
    return "\n".join(out).rstrip() + "\n"


def build_sif(definition_path: Path, sif: Path, echo: Echo, run: Callable[..., Any] = subprocess.run) -> bool:
    """``apptainer build`` (or ``singularity build``) into a temp file, renamed onto ``sif``. False if absent."""
    tool = shutil.which("apptainer") or shutil.which("singularity")
    if tool is None:
        echo("sif: " + INSTALL_HINT.format(sif=shlex.quote(str(sif)), definition=shlex.quote(str(definition_path))))
        return False
    sif = sif.absolute()
    tmp = sif.with_name(f".{sif.stem}.partial.sif")
    argv = [Path(tool).name, "build", "--force", str(tmp), str(definition_path)]
    echo(f"sif: {shlex.join(argv)}")
    try:
        proc = run([tool, *argv[1:]], check=False, cwd=str(definition_path.parent))
        if proc.returncode != 0 or not tmp.is_file():
            raise SifError(f"{argv[0]} build failed (exit {proc.returncode}); see its output above")
        os.replace(tmp, sif)
    finally:
        tmp.unlink(missing_ok=True)
    echo(f"sif: wrote {sif}")
    return True
