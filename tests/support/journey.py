"""Journey helpers: ``step(name)`` names the step of a user's path in any failure, so a red journey says where
the path broke; ``same_losses`` compares a resumed run with an uninterrupted one."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Prefix any failure inside with the journey step it happened in."""
    try:
        yield
    except AssertionError as err:
        raise AssertionError(f"journey step {name!r} failed: {err}") from err
    except Exception as err:  # a crash in a step is that step's failure too
        raise AssertionError(f"journey step {name!r} failed: {type(err).__name__}: {err}") from err


def same_losses(got: dict[int, float], want: dict[int, float]) -> bool:
    return sorted(got) == sorted(want) and all(
        math.isclose(got[i], want[i], rel_tol=1e-6, abs_tol=1e-7) for i in want)
