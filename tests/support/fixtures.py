"""pytest fixtures for the real components; import them into a test module::

    from tests.support.fixtures import phoenix, realdata_config_dir  # noqa: F401

Policy for a component that is not installed: the test is SKIPPED with the install
command as the reason, except when ``CI`` or ``CCOTEL_REQUIRE_REAL_COMPONENTS`` is
set (non-empty, not "0"/"false"): then it FAILS, so that a CI run cannot go green
on a missing install step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support import ccusage as _ccusage
from tests.support import phoenix as _phoenix

__all__ = ["ccusage_installed", "missing_component", "phoenix", "realdata_config_dir"]


def _strict() -> bool:
    for var in ("CCOTEL_REQUIRE_REAL_COMPONENTS", "CI"):
        value = os.environ.get(var, "").strip().lower()
        if value and value not in ("0", "false", "no"):
            return True
    return False


def missing_component(reason: str) -> NoReturn:
    """Skip (locally) or fail (CI / CCOTEL_REQUIRE_REAL_COMPONENTS) with ``reason``."""
    if _strict():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def phoenix() -> Iterator[_phoenix.PhoenixServer]:
    """One Phoenix server for the whole pytest session (loopback, free ports, temp sqlite).

    Shared by every test that uses it: spans accumulate.  Read back with
    ``trace_ids=[...]`` or send to a project of your own (resource attribute
    ``openinference.project.name``), and use fresh trace/span ids per test --
    Phoenix ignores a span whose span id it already has.
    """
    found = _phoenix.installed_phoenix_version()
    if found != _phoenix.PHOENIX_VERSION:
        missing_component(
            f"Phoenix {_phoenix.PHOENIX_VERSION} not in {_phoenix.phoenix_venv()} "
            f"(found {found!r}): run `python -m tests.support.install_phoenix`"
        )
    with _phoenix.PhoenixServer() as server:
        yield server


@pytest.fixture(scope="session")
def ccusage_installed() -> Path:
    found = _ccusage.installed_ccusage_version()
    if found != _ccusage.CCUSAGE_VERSION:
        missing_component(
            f"ccusage {_ccusage.CCUSAGE_VERSION} not in {_ccusage.ccusage_prefix()} "
            f"(found {found!r}): run `python -m tests.support.install_ccusage`"
        )
    return _ccusage.ccusage_bin()


@pytest.fixture(scope="session")
def realdata_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Claude config dir (copies) of shared/realdata, shared by the session."""
    if not _ccusage.realdata_dir().is_dir():
        missing_component(f"no realdata at {_ccusage.realdata_dir()}")
    return _ccusage.realdata_tree(tmp_path_factory.mktemp("realdata") / "claude")
