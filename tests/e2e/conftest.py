"""Shared setup for tests/e2e.

* Makes ``tests.harness`` importable however pytest is started (``pytest`` or ``python -m pytest``).
* ``claude_cli``: a session fixture that installs the Claude Code versions the live tests run on
  (``CCOTEL_CLAUDE_VERSIONS``: ``newest`` by default, ``ends``, ``all``, ``oldest`` or a list; see
  ``tests.harness.install.selected_versions``) into ``tests/.node/<version>`` (idempotent; see
  ``python -m tests.harness.install``), so ``pytest -m e2e`` works on a fresh machine. It returns the
  binary of the newest of them (what ``Sandbox`` runs by default when it is the newest of the matrix).
* ``live_versions``: those versions, for parametrized tests.
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
    from tests.harness.install import CLAUDE_CODE_VERSION, install, selected_versions

    versions = set(selected_versions()) | {CLAUDE_CODE_VERSION}  # the Sandbox default is always needed
    try:
        binaries = {v: install(version=v, quiet=True) for v in sorted(versions)}
    except RuntimeError as exc:  # npm missing or the install failed: a real failure, say why
        pytest.fail(f"cannot install the Claude Code CLI for e2e tests: {exc}")
    return binaries[CLAUDE_CODE_VERSION]
