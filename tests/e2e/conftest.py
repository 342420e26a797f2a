"""Shared setup for tests/e2e.

* Makes ``tests.harness`` importable however pytest is started (``pytest`` or ``python -m pytest``).
* ``claude_cli``: a session fixture that installs the pinned Claude Code CLI into ``tests/.node``
  (idempotent; see ``python -m tests.harness.install``), so ``pytest -m e2e`` works on a fresh machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    from tests.harness.install import install

    try:
        return install(quiet=True)
    except RuntimeError as exc:  # npm missing or the install failed: a real failure, say why
        pytest.fail(f"cannot install the Claude Code CLI for e2e tests: {exc}")
