"""Session-wide test settings: the intrinsic verification cache lives in the session's temporary
directory, so a test run never writes into the user's ~/.cache (and starts from an empty cache)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _verification_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORSEARCH_VERIFY_CACHE", str(tmp_path_factory.mktemp("verified")))
    yield
    mp.undo()
