"""Install advice is true (#52): mtk installs from a clone of its repository (README), and the name ``mtk`` on
PyPI is another project. Where mtk is installed, ``pip install 'mtk[extra]'`` resolves to that install and adds the
extra; where it is missing (a Slurm node), advice by name would fetch the other project."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("mtk", "launcher", "containers", "slurm", "k8s", "data_jobs", "training")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "containers" / "README.md"]
# `pip install mtk` alone (an index's mtk), or `mtk[...]` unquoted (a shell glob as well); "never `pip install mtk`"
# is the README saying exactly this.
BY_NAME = re.compile(r"(?<!never `)pip install mtk(?![\w.-])|pip install mtk\[")


def _texts() -> list[tuple[str, str]]:
    files = [p for folder in SHIPPED for pattern in ("*.py", "*.j2", "*.sh")
             for p in sorted((ROOT / folder).rglob(pattern))] + PAGES
    return [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in files]


def test_no_text_tells_a_user_to_install_mtk_by_name_from_an_index():
    found = [f"{rel}: {m.group(0)}" for rel, text in _texts() for m in BY_NAME.finditer(" ".join(text.split()))]
    assert found == []
    assert BY_NAME.search('echo "install mtk (pip install mtk[train]) in the environment"')  # the old Slurm line
    assert BY_NAME.search("a login node with plain ``pip install mtk``")
    assert not BY_NAME.search("never `pip install mtk`: that name on PyPI is another project")
    assert not BY_NAME.search("pip install 'mtk[eks]'")


def test_the_slurm_script_says_how_to_install_mtk_on_a_node_without_it(tmp_path):
    """The node script the sbatch file carries, run as srun runs it on a node whose PATH has no mtk: it stops (127)
    with the clone's command, quotes intact."""
    from mtk.launcher.paths import resolve_paths
    from mtk.slurm.render import render

    from mtk.spec import load_job

    job = resolve_paths(load_job(ROOT / "examples" / "tiny-slurm.yaml", [], backend="slurm"), "slurm",
                        cwd=str(tmp_path))
    script = render(job, str(tmp_path / "run")).files["train.sbatch"]
    start = script.index("MTK_NODE_SH='")
    block = script[start:script.index("\n'\n", start) + 3]  # the assignment, as the batch script runs it
    out = subprocess.run(["bash", "-c", f'{block}\nbash -c "$MTK_NODE_SH" node mtk-entrypoint'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 127, out
    assert ('mtk-entrypoint not found on' in out.stderr and 'install mtk from a clone of its repository '
            '(pip install ".[train]" in it; the name mtk on PyPI is another project)' in out.stderr), out.stderr
