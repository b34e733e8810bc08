"""Session-wide test settings.

- The intrinsic verification cache lives in the session's temporary directory, so a test run
  never writes into the user's ~/.cache (and starts from an empty cache).
- The property-based fuzzers draw the same examples in every run (hypothesis profile
  ``repeatable``, the default), so CI's verdict depends on the code, not on the draw.
  ``TENSORSEARCH_HYPOTHESIS=explore`` draws fresh examples each run, to hunt for new failures.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "repeatable", derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile("explore", derandomize=False, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("TENSORSEARCH_HYPOTHESIS", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def _verification_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORSEARCH_VERIFY_CACHE", str(tmp_path_factory.mktemp("verified")))
    yield
    mp.undo()
