"""A quick, read-only look into the usage ledger (``ledger.db``) for the status line: the standard
library's SQLite module only (ledger.py's Ledger creates and migrates, and loads more than a status line
that runs after every message can afford), opened read-only, never written, never waited on.

Only a ledger written for the same roots is used (as the report uses it). The columns are
ledger.py's schema (calls, turns, agents)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    import sqlite3
    from typing import Any

__all__ = ["open_read_only", "calls_since", "session_problems"]

LEDGER_FILE = "ledger.db"  # ledger.LEDGER_FILE (tests hold them equal)


def _sqlite3() -> Any:
    """The C module under ``sqlite3``: the package's ``dbapi2`` adds only datetime's adapters and
    converters (no value here is a date) and imports ``datetime`` for them."""
    try:
        import _sqlite3

        return _sqlite3
    except ImportError:  # a Python whose sqlite3 is built otherwise
        import sqlite3

        return sqlite3


def open_read_only(state_dir: str, roots: list[str]) -> sqlite3.Connection | None:
    """The ledger in ``state_dir``, read-only, if it was written for exactly these roots; None if
    there is none, it is locked or broken, or it covers other roots."""
    path = os.path.join(state_dir, LEDGER_FILE)
    if not os.path.isfile(path):
        return None
    db = _sqlite3()  # only when there is a ledger to read
    try:
        conn: sqlite3.Connection = db.connect(f"file:{path}?mode=ro", uri=True, timeout=0.02)
        row = conn.execute("SELECT value FROM meta WHERE key = 'roots'").fetchone()
    except db.Error:
        return None
    if row is None or set(row[0].split("\n")) != {os.path.realpath(r) for r in roots}:
        conn.close()
        return None
    return conn


if TYPE_CHECKING:
    CallSums = tuple[str, str, int, int, int, int, int, float | None]


def calls_since(conn: sqlite3.Connection, after_ns: int) -> list[CallSums]:
    """The billed calls at or after ``after_ns``, oldest first: (key, session, time ns, input,
    output, cache read, cache write, cost or None)."""
    db = _sqlite3()
    try:
        return conn.execute("SELECT key, session_id, time_ns, input, output, cache_read, cache_write, cost "
                            "FROM calls WHERE time_ns >= ? AND api_error = 0 ORDER BY time_ns", (after_ns,)).fetchall()
    except db.Error:
        return []


def session_problems(conn: sqlite3.Connection, session_id: str, after_ns: int) -> list[str]:
    """What went wrong in the session's turns that ended at or after ``after_ns`` (as ``ccotel
    run`` recorded them): killed turns, stalled or orphaned tool calls, interrupted subagents."""
    db = _sqlite3()
    out: list[str] = []
    try:
        for outcome, stalled, orphaned in conn.execute(
                "SELECT outcome, stalled, orphaned_tools FROM turns WHERE session_id = ? AND end_ns >= ? "
                "ORDER BY end_ns DESC LIMIT 5", (session_id, after_ns)):
            if outcome == "killed":
                out.append("turn killed")
            if stalled:
                out.append(f"{stalled} stalled tool{'s' if stalled != 1 else ''}")
            if orphaned:
                out.append(f"{orphaned} orphaned tool{'s' if orphaned != 1 else ''}")
        (agents,) = conn.execute("SELECT count(*) FROM agents WHERE session_id = ? AND end_ns >= ? AND interrupted",
                                 (session_id, after_ns)).fetchone()
    except db.Error:
        return out
    if agents:
        out.append(f"{agents} subagent{'s' if agents != 1 else ''} killed")
    return list(dict.fromkeys(out))
