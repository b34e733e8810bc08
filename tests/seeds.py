"""Every random draw of the test suite is seeded, so that a verdict depends on the code, not on the draw.

``seeded_rng()`` and ``draw_seed()`` derive their seed from the running test's id and how many
draws that test made before, so each test (and each draw within it) gets its own inputs, the same
in every run and whichever tests run beside it. ``TENSORSEARCH_TEST_SEED=N`` (default 0) moves
every draw to other inputs, to hunt for failures, as ``TENSORSEARCH_HYPOTHESIS=explore`` does for
the property-based fuzzers; a test that reports its seed can be rerun with it.
"""

from __future__ import annotations

import os
import zlib

import numpy as np

__all__ = ["draw_seed", "seeded_rng"]

_draws: dict[str, int] = {}


def draw_seed() -> int:
    """A 32-bit seed for this draw: the run's base seed, the current test and the draw's number."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]  # "tests/x.py::test_y (call)"
    n = _draws.get(test, 0)
    _draws.clear()  # only the current test's count is kept
    _draws[test] = n + 1
    base = int(os.environ.get("TENSORSEARCH_TEST_SEED", "0"))
    return zlib.crc32(f"{base}:{test}:{n}".encode())


def seeded_rng() -> np.random.Generator:
    """A numpy generator seeded by :func:`draw_seed`."""
    return np.random.default_rng(draw_seed())
