"""Shared test helpers. Area fixtures live in conftest.py files of their own test folders."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def repo() -> Path:
    return REPO
