"""The build context: the Dockerfile, requirements.txt and the mtk wheel built from this checkout. Nothing else.

The wheel is built from a copy of the package folders (so the checkout gets no ``build/`` or egg-info litter)
with a fixed ``SOURCE_DATE_EPOCH``, and its identity is the sha256 of its members, not of the zip bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mtk.files import atomic_write

from .build import BuildError
from .recipe import Recipe

# Top-level files the wheel build reads; every top-level folder with an __init__.py is a package (setup.py).
_BUILD_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md", "LICENSE")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.egg-info", ".pytest_cache")
_EPOCH = "315532800"  # 1980-01-01, the earliest zip timestamp


@dataclass(frozen=True)
class Context:
    """A build context on disk, ready for ``docker build``."""

    path: Path
    files: dict[str, str]  # name -> sha256 of the file (of its members, for the wheel)
    sizes: dict[str, int]

    def listing(self) -> str:
        rows = [f"{self.sizes[name]:>12}  {digest if digest.startswith('(') else digest[:16]}  {name}"
                for name, digest in sorted(self.files.items())]
        return f"# build context: {self.path}\n# bytes        sha256           file\n" + "\n".join(rows) + "\n"


def source_files(source: Path) -> list[Path]:
    """What the wheel is built from: the build files and every top-level package folder (tests excepted)."""
    files = [source / name for name in _BUILD_FILES if (source / name).is_file()]
    for child in sorted(source.iterdir()):
        if child.is_dir() and (child / "__init__.py").is_file() and child.name != "tests":
            files += sorted(p for p in child.rglob("*") if p.is_file() and not _ignored(p.relative_to(source)))
    return files


def _ignored(rel: Path) -> bool:
    return any(_IGNORE(str(rel.parent), [part]) for part in rel.parts)


def copy_source(source: Path, dest: Path) -> None:
    """Copy :func:`source_files` into ``dest``."""
    for path in source_files(source):
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def source_digest(source: Path) -> str:
    h = hashlib.sha256()
    for path in source_files(source):
        h.update(str(path.relative_to(source)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def build_wheel(source: Path, out_dir: Path) -> Path:
    """``pip wheel`` the checkout into ``out_dir`` offline (no index, no build isolation); return the wheel.

    The wheel of an unchanged checkout is reused (``out_dir/.source-sha256`` records what it was built from).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    digest, stamp = source_digest(source), out_dir / ".source-sha256"
    previous = sorted(out_dir.glob("mtk-*.whl"))
    if len(previous) == 1 and stamp.is_file() and stamp.read_text().strip() == digest:
        return previous[0]
    with tempfile.TemporaryDirectory(prefix="mtk-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        copy_source(source, src)
        dist = Path(tmp) / "dist"
        env = {**os.environ, "SOURCE_DATE_EPOCH": _EPOCH, "PIP_NO_INPUT": "1"}
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "--quiet", "--wheel-dir", str(dist), str(src)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wheels = sorted(dist.glob("mtk-*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise BuildError(f"building the mtk wheel from {source} failed (exit {proc.returncode}):\n"
                              f"{proc.stdout}{proc.stderr}".rstrip())
        for old in previous:
            old.unlink()
        dest = out_dir / wheels[0].name
        shutil.move(str(wheels[0]), dest)
    atomic_write(stamp, digest + "\n")
    return dest


def wheel_digest(path: Path) -> str:
    """sha256 over (name, bytes) of every member: stable across rebuilds of the same code."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as zf:
        for name in sorted(zf.namelist()):
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(zf.read(name)).digest())
    return h.hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def planned_files(recipe: Recipe) -> dict[str, bytes | None]:
    """The context's files; the wheel's bytes are None until it is built."""
    return {"Dockerfile": recipe.dockerfile.encode(), "requirements.txt": recipe.requirements_text().encode(),
            recipe.wheel_name: None}


def write_context(recipe: Recipe, path: Path, wheel: Path | None) -> Context:
    """Write the context into ``path`` (stale files from an older build are removed: docker sends them all)."""
    path.mkdir(parents=True, exist_ok=True)
    files, sizes = {}, {}
    for name, data in planned_files(recipe).items():
        if data is None:
            if wheel is None:
                (path / name).unlink(missing_ok=True)  # a wheel from an older build is not this context's
                files[name], sizes[name] = "(built at build time)", 0
                continue
            if wheel.resolve() != (path / name).resolve():
                shutil.copyfile(wheel, path / name)
            files[name], sizes[name] = wheel_digest(path / name), (path / name).stat().st_size
            continue
        atomic_write(path / name, data)
        files[name], sizes[name] = _sha256(data), len(data)
    for child in path.iterdir():
        if child.name not in files:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    return Context(path=path, files=files, sizes=sizes)
