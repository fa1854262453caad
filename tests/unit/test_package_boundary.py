"""The shipped package holds no test scaffolding and reads no test-only switch."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("mtk", "launcher", "containers", "slurm", "k8s", "data_jobs", "training")
TEST_ONLY_MODULES = ("support", "tests", "pytest", "hypothesis")


def _package_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_no_package_module_imports_test_code():
    offenders = []
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in TEST_ONLY_MODULES]
    assert not offenders


def test_no_package_file_reads_the_fault_switch():
    assert [p for p in _package_files() if "MTK_FAULT" in p.read_text()] == []


def test_scaffolding_is_not_shipped():
    for name in ("mtk.slurm.minicluster", "mtk.k8s.operator_env"):
        assert importlib.util.find_spec(name) is None, name
    assert importlib.util.find_spec("support.minicluster") is not None  # where the tests find it
