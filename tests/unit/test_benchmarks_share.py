"""Benchmarks share the tests' doubles and helpers instead of copying them (#52): one free-port helper, one Slurm
double (its host lists held to mtk's expansion), one Kubernetes client double; and the old-code comparison of
benchmarks/scale_fs.py says plainly when a clone lacks the history it reads."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def _defined(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    binds = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(
        ".bind") and "0)" in ast.unparse(n)]
    return found + binds


def test_no_benchmark_writes_its_own_copy_of_a_test_helper():
    copies = {p.name: hits for p in BENCHMARKS if (hits := [
        n for n in _defined(p) if n in ("free_port", "_free_port", "free_ports", "_hostlist", "fake_slurm")
        or n.startswith(("Fake", "Slow")) or n.endswith("Kube") or ".bind(" in n])}
    assert copies == {}, "import it from tests/support (support.ports, support.slurm_commands, support.kube_boundary)"


def _scale_fs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("scale_fs_under_test", ROOT / "benchmarks" / "scale_fs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"})


def test_scale_fs_says_when_a_clone_lacks_the_old_commit(tmp_path):
    scale_fs = _scale_fs()
    origin = tmp_path / "origin"
    origin.mkdir()
    _git("init", "-q", cwd=origin)
    for i in range(2):
        (origin / "f").write_text(str(i))
        _git("add", "f", cwd=origin)
        _git("commit", "-qm", f"c{i}", cwd=origin)
    _git("clone", "-q", "--depth", "1", f"file://{origin}", str(tmp_path / "shallow"), cwd=tmp_path)
    shallow = scale_fs.missing_history(tmp_path / "shallow")
    assert "this clone is shallow" in shallow and "git fetch --unshallow" in shallow
    assert scale_fs.BEFORE[:12] in shallow
    assert "this clone lacks it" in scale_fs.missing_history(origin)
    assert "no git checkout" in scale_fs.missing_history(tmp_path)
    said: list[str] = []
    assert scale_fs.measure_points([], 1, 16, False, log=lambda *a, **k: said.append(" ".join(a))) == {}
    if scale_fs.missing_history():  # this checkout itself (a shallow CI clone): the run says so up front
        assert said and "measuring the after rows only" in said[0]
    else:
        assert said == []
