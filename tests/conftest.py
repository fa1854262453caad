"""Shared test helpers. Area fixtures live in conftest.py files of their own test folders."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def corpus_formats():
    """tests/corpus_formats.py: one document list written as JSONL + .zst + Parquet and as one JSONL file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("corpus_formats", Path(__file__).parent / "corpus_formats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
