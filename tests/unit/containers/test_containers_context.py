"""The build context: a wheel from the checkout (deterministic, templates inside) and nothing stale."""

from __future__ import annotations

import zipfile
from pathlib import Path

from mtk.containers.context import planned_files, wheel_digest, write_context
from mtk.containers.recipe import make_recipe

from mtk.spec import load_job

REPO = Path(__file__).resolve().parents[3]


def test_context_holds_exactly_dockerfile_requirements_and_wheel(tmp_path):
    rec = make_recipe(load_job(REPO / "examples" / "tiny.yaml"), REPO)
    ctx_dir = tmp_path / "ctx"
    ctx_dir.mkdir()
    (ctx_dir / "stale.whl").write_text("old")
    wheel = tmp_path / rec.wheel_name
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("mtk/__init__.py", "__version__ = '0'\n")
    ctx = write_context(rec, ctx_dir, wheel)
    assert sorted(p.name for p in ctx_dir.iterdir()) == sorted(planned_files(rec)) == sorted(
        ["Dockerfile", "requirements.txt", rec.wheel_name])
    assert (ctx_dir / "Dockerfile").read_text() == rec.dockerfile
    assert (ctx_dir / "requirements.txt").read_text().splitlines() == rec.requirements
    assert ctx.files[rec.wheel_name] == wheel_digest(wheel)
    listing = ctx.listing()
    assert all(name in listing for name in planned_files(rec))
    dry = write_context(rec, ctx_dir, None)  # dry run: the wheel is only announced
    assert not (ctx_dir / rec.wheel_name).exists() and "(built at build time)" in dry.listing()
