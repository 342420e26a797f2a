"""Test-wide settings."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir() -> Iterator[None]:
    """ccotel keeps genai-prices' answers under $XDG_CACHE_HOME (pricing.py): the tests, and the
    ccotel processes they start, use a directory of their own, never the machine's ~/.cache."""
    old = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="ccotel-test-cache-") as d:
        os.environ["XDG_CACHE_HOME"] = d
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = old
