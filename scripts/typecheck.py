#!/usr/bin/env python3
"""Type-check mtk as installed (`make typecheck`): mypy over ``-p mtk`` with the settings in pyproject.toml.

setup.py maps top-level folders onto the ``mtk`` namespace (``launcher/`` is ``mtk.launcher``). The editable
install serves that mapping through an import hook, which mypy does not run, and no mypy setting maps a folder
onto another package name. So this script asks the interpreter where each ``mtk.<name>`` is installed, mirrors
exactly that as a tree of symlinks (``.mypy_cache/view/mtk/launcher -> launcher/``) and runs mypy on ``-p mtk``
from inside it, away from the source tree. File names in mypy's
output are mapped back to the source tree, so they open in an editor. Exit status is mypy's.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".mypy_cache"
VIEW = CACHE / "view"


def installed_layout() -> dict[str, Path]:
    """``{"launcher": <dir mtk.launcher is imported from>, ...}`` for every top-level subpackage of mtk."""
    layout = {}
    for folder in sorted(p for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "mtk"):
        spec = importlib.util.find_spec(f"mtk.{folder.name}")
        if spec is not None and spec.submodule_search_locations:
            layout[folder.name] = Path(next(iter(spec.submodule_search_locations))).resolve()
    return layout


def build_view(layout: dict[str, Path]) -> None:
    """Recreate ``VIEW/mtk``: mtk's own files plus one symlink per mapped subpackage."""
    spec = importlib.util.find_spec("mtk")
    if spec is None or spec.origin is None:
        sys.exit("typecheck: mtk is not installed in this Python; run `make deps-test` first")
    shutil.rmtree(VIEW, ignore_errors=True)
    (VIEW / "mtk").mkdir(parents=True)
    (CACHE / ".gitignore").write_text("*\n")  # what mypy puts in its cache dir; here before mypy runs
    for entry in Path(spec.origin).parent.glob("*.py"):
        (VIEW / "mtk" / entry.name).symlink_to(entry)
    for entry in Path(spec.origin).parent.glob("*/__init__.py"):  # the core's own sub-packages (mtk/spec)
        (VIEW / "mtk" / entry.parent.name).symlink_to(entry.parent, target_is_directory=True)
    for name, target in layout.items():
        (VIEW / "mtk" / name).symlink_to(target, target_is_directory=True)


def main() -> int:
    start = time.monotonic()
    layout = installed_layout()
    if not layout:
        sys.exit("typecheck: no mtk.* subpackage is importable; run `make deps-test` first")
    build_view(layout)
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(CACHE), "-p", "mtk", *sys.argv[1:]]
    proc = subprocess.run(cmd, cwd=VIEW, capture_output=True, text=True)
    # mtk/launcher/cli/x.py -> launcher/cli/x.py (relative to the source tree, where the file really is)
    back = {f"mtk/{name}/": f"{target.relative_to(ROOT)}/" if target.is_relative_to(ROOT) else f"{target}/"
            for name, target in layout.items()}
    pattern = re.compile("^(" + "|".join(map(re.escape, back)) + ")", re.MULTILINE)
    sys.stdout.write(pattern.sub(lambda m: back[m.group(1)], proc.stdout))
    sys.stderr.write(proc.stderr)
    print(f"typecheck: mypy -p mtk ({', '.join(f'mtk.{n}' for n in layout)}) took {time.monotonic() - start:.0f} s",
          file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
