"""The mtk wheel built from the checkout: reproducible bytes-in-members, templates inside, no tests."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from mtk.containers.context import build_wheel, copy_source, wheel_digest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def test_wheel_is_reproducible_and_ships_the_templates(tmp_path):
    snapshot = tmp_path / "src"  # other work may edit the live checkout between the two builds
    snapshot.mkdir()
    copy_source(REPO, snapshot)
    first = build_wheel(snapshot, tmp_path / "a")
    second = build_wheel(snapshot, tmp_path / "b")
    assert first.name == second.name == f"mtk-{__import__('mtk').__version__}-py3-none-any.whl"
    assert wheel_digest(first) == wheel_digest(second)
    mtime = first.stat().st_mtime_ns
    assert build_wheel(snapshot, tmp_path / "a") == first and first.stat().st_mtime_ns == mtime  # reused
    with open(snapshot / "containers" / "doctor.py", "a") as fh:
        fh.write("# changed\n")
    rebuilt = build_wheel(snapshot, tmp_path / "a")
    assert wheel_digest(rebuilt) != wheel_digest(second) and sorted((tmp_path / "a").glob("*.whl")) == [rebuilt]
    names = zipfile.ZipFile(first).namelist()
    assert "mtk/containers/templates/Dockerfile.j2" in names and "mtk/containers/doctor.py" in names
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)
