"""User journeys: one test each, walking a user's path across features over real parts, asserting at every step
(helpers in tests/support/journey.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.readme_env import ReadmeEnv, readme_clone
from support.slurm_harness import Harness, drained


@pytest.fixture
def slurm(slurm_cluster, tmp_path) -> Iterator[Harness]:
    """The test cluster driven through the CLI; left empty for the next test."""
    h = Harness(slurm_cluster, tmp_path)
    yield h
    drained(h)


@pytest.fixture(scope="session")
def readme_env(tmp_path_factory) -> ReadmeEnv:
    """A fresh clone + `make demo` in the README's own environment, built once for the journeys that start there."""
    return readme_clone(tmp_path_factory.mktemp("readme"))
