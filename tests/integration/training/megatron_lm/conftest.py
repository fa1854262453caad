"""The tests in this folder run Megatron-LM's own ``pretrain_gpt.py`` and so need a Megatron-LM tree, which a
clean machine (CI) does not have: they run only when this folder or file is named on the command line

    .venv/bin/python -m pytest tests/integration/training/megatron_lm -q      (or: make test-megatron-lm)

Otherwise (``make test`` runs ``pytest tests``) they are collected and DESELECTED, which pytest counts in its
summary line, and the terminal summary says which and why. Once selected they find the tree in
``$MEGATRON_LM_TREE`` or extract ``core_r0.19.0`` from the mirror, and fail (never skip) when there is none.
What the default suite checks instead uses only committed data: ``tests/fixtures/megatron_lm`` (checkpoints and
losses recorded by pretrain_gpt.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REASON = ("on demand: needs a Megatron-LM tree (MEGATRON_LM_TREE or the mirror); run "
          "`make test-megatron-lm` or name tests/integration/training/megatron_lm")
_LEFT_OUT = pytest.StashKey[list[str]]()


def _named(config, path: Path) -> bool:
    for arg in config.args:
        target = Path(arg.split("::")[0]).resolve()
        if target in (path, HERE):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect this folder's tests unless the folder or their file was named; remember them for the summary."""
    out = [i for i in items if HERE in Path(i.path).resolve().parents and not _named(config, Path(i.path).resolve())]
    if not out:
        return
    config.stash[_LEFT_OUT] = [i.nodeid for i in out]
    items[:] = [i for i in items if i not in out]
    config.hook.pytest_deselected(items=out)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    left_out = config.stash.get(_LEFT_OUT, [])
    if left_out:
        terminalreporter.write_sep("-", f"{len(left_out)} deselected: {REASON}", yellow=True)
        for nodeid in left_out:
            terminalreporter.write_line(f"deselected {nodeid}")


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
