"""Where ccotel's state is: one rule for every command, and for the hook handler, which must start
fast and so imports nothing but ``os`` (state.py, which re-exports these, loads much more)."""

from __future__ import annotations

import os

__all__ = ["default_state_dir", "is_url", "resolve_state", "local_state_dir"]


def default_state_dir(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ccotel")


def is_url(location: str | None) -> bool:
    """A PostgreSQL URL (the fleet backend) rather than a state dir (SQLite)."""
    return location is not None and location.startswith(("postgresql://", "postgres://"))


def resolve_state(state: str | None, state_dir: str | None = None, env: dict[str, str] | None = None) -> str | None:
    """Where the state is: ``--state`` (a dir or a ``postgresql://`` URL), else its alias
    ``--state-dir``, else ``$CCOTEL_STATE``, else the default dir. None: ``none`` (no state)."""
    env = dict(os.environ) if env is None else env
    location = state or state_dir or env.get("CCOTEL_STATE") or default_state_dir(env)
    return None if location == "none" else location


def local_state_dir(location: str | None, env: dict[str, str] | None = None) -> str:
    """A directory on this host for files beside the state (the hook spool): the state dir itself,
    or the default dir when the state is a PostgreSQL URL or ``none``."""
    if location is None or is_url(location):
        return default_state_dir(env)
    return location
