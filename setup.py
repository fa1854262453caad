"""Maps the top-level source folders onto the ``mtk`` import namespace (``launcher/`` -> ``mtk.launcher``).

Metadata lives in pyproject.toml; this file only computes the package list so that a new sub-package
needs no edit here.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
FOLDERS = ("launcher", "containers", "slurm", "k8s", "data_jobs", "training")


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = ["mtk"], {"mtk": "mtk"}
    for init in sorted((ROOT / "mtk").rglob("*/__init__.py")):  # the core's own sub-packages (mtk/spec)
        rel = init.parent.relative_to(ROOT)
        packages.append(".".join(rel.parts))
        package_dir[".".join(rel.parts)] = rel.as_posix()
    for folder in FOLDERS:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            name = "mtk." + ".".join(rel.parts)
            packages.append(name)
            package_dir[name] = rel.as_posix()
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
