"""The tests in this folder run Megatron-LM's own ``pretrain_gpt.py`` and so need a Megatron-LM tree, which a
clean machine (CI) does not have: they are collected only when this folder or file is named on the command line

    .venv/bin/python -m pytest tests/integration/training/megatron_lm -q

(``make test`` runs ``pytest tests`` and so leaves them out). Once collected they find the tree in
``$MEGATRON_LM_TREE`` or extract ``core_r0.19.0`` from the mirror, and fail (never skip) when there is none.
What the default suite checks instead uses only committed data: ``tests/fixtures/megatron_lm`` (checkpoints and
losses recorded by pretrain_gpt.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _named(config, path: Path) -> bool:
    for arg in config.args:
        target = Path(arg.split("::")[0]).resolve()
        if target in (path, HERE):
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        return not _named(config, Path(collection_path).resolve())
    return None


@pytest.fixture(scope="session")
def megatron_lm_tree(tmp_path_factory) -> Path:
    from support import megatron_lm_run as mlm

    given = os.environ.get("MEGATRON_LM_TREE")
    if given:
        tree = Path(given)
        if not (tree / "pretrain_gpt.py").exists():
            pytest.fail(f"MEGATRON_LM_TREE={given} has no pretrain_gpt.py: point it at a NVIDIA/Megatron-LM checkout")
        return tree
    try:
        return mlm.extract_tree(tmp_path_factory.mktemp("megatron-lm"))
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} (or set MEGATRON_LM_TREE)")
