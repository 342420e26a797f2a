"""The backend a state location names: SQLite in a dir (sqlite.py), PostgreSQL at a URL
(postgres.py, loaded only then: psycopg comes with the ``fleet`` extra)."""

from __future__ import annotations

from ccotel.store.sqlite import SqliteState, lock_state_dir
from ccotel.store.state import State, StateLock, host_id, is_url

__all__ = ["open_state", "lock_state"]


def open_state(location: str, host: str | None = None, verify: bool = True) -> State:
    """The state at ``location``: SQLite in a dir, or PostgreSQL at a URL (``host``: this host's id).
    ``verify``: check a SQLite database at open (a catch-up worker opens one its parent checked)."""
    if is_url(location):
        from ccotel.store.postgres import PgState

        return PgState(location, host_id(host))
    return SqliteState(location, verify=verify)


def lock_state(location: str, host: str | None = None) -> StateLock:
    """The state for this process: the dir's flock, or this host id's lock in PostgreSQL."""
    if is_url(location):
        from ccotel.store.postgres import lock_host

        return lock_host(location, host_id(host))
    return lock_state_dir(location)
