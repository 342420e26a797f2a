"""The backend a state location names: SQLite in a dir (sqlite.py), PostgreSQL at a URL
(postgres.py, loaded only then: psycopg comes with the ``fleet`` extra)."""

from __future__ import annotations

from ccotel.store.sqlite import SqliteState
from ccotel.store.state import State, StateLock, claim_lease, host_id, is_url
from ccotel.store.statedir import lock_state_dir

__all__ = ["open_state", "lock_state", "backend_missing", "FLEET_EXTRA"]

FLEET_EXTRA = "pip install 'ccotel[fleet]'"  # what brings psycopg (pyproject.toml's extra)


def backend_missing(location: str | None) -> str | None:
    """Why the backend ``location`` names cannot be loaded (a PostgreSQL URL without psycopg
    installed), for the operator, or None. Checked before any work: an ImportError deep in the
    first state access would be a traceback instead of what to install. The URL is not quoted
    (it may hold a password)."""
    if not is_url(location):
        return None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return f"--state postgresql://...: a PostgreSQL state needs psycopg, which is not installed: {FLEET_EXTRA}"
    return None


def open_state(location: str, host: str | None = None, verify: bool = True) -> State:
    """The state at ``location``: SQLite in a dir, or PostgreSQL at a URL (``host``: this host's id).
    ``verify``: check a SQLite database at open (a catch-up worker opens one its parent checked)."""
    if is_url(location):
        from ccotel.store.postgres import PgState

        return PgState(location, host_id(host))
    return SqliteState(location, verify=verify)


def lock_state(location: str, host: str | None = None, lease_s: str | float | None = None) -> StateLock:
    """The state for this process: the dir's flock, or this host id's lock in PostgreSQL with its
    lease on claims (``lease_s``: --claim-lease; state.claim_lease)."""
    if is_url(location):
        from ccotel.store.postgres_lease import lock_host

        return lock_host(location, host_id(host), claim_lease(lease_s))
    return lock_state_dir(location)
