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

__all__ = ["open_read_only", "calls_since", "session_turns", "killed_agents", "problems", "ledger_signature",
           "PROBLEM_TURNS"]

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


def ledger_signature(state_dir: str) -> list[Any] | None:
    """What changes whenever the ledger does, read without SQLite: the database file's inode, size
    and mtime, the WAL's size and mtime, and the WAL index's header (its first 48 bytes: the frame
    count and the running checksum of the last frame, which every commit changes; mtimes alone move
    by a clock tick, and a WAL restarted after a checkpoint can keep its size). Read before the
    ledger is queried, so that what is read is never older than the signature. None: no ledger."""
    path = os.path.join(state_dir, LEDGER_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return None
    sig: list[Any] = [st.st_ino, st.st_size, st.st_mtime_ns]
    try:
        wal = os.stat(path + "-wal")
        sig += [wal.st_size, wal.st_mtime_ns]
    except OSError:
        sig += [None, None]
    try:
        with open(path + "-shm", "rb") as f:
            sig.append(f.read(48).hex())
    except OSError:
        sig.append(None)
    return sig


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


def calls_since(conn: sqlite3.Connection, after_ns: int) -> list[CallSums] | None:
    """The billed calls at or after ``after_ns``, oldest first: (key, session, time ns, input,
    output, cache read, cache write, cost or None). None: the ledger could not be read."""
    db = _sqlite3()
    try:
        return conn.execute("SELECT key, session_id, time_ns, input, output, cache_read, cache_write, cost "
                            "FROM calls WHERE time_ns >= ? AND api_error = 0 ORDER BY time_ns", (after_ns,)).fetchall()
    except db.Error:
        return None


if TYPE_CHECKING:
    TurnRow = tuple[int, str, int, int]  # end ns, outcome, stalled tool calls, orphaned tool calls

PROBLEM_TURNS = 5  # the session's last turns looked at


def session_turns(conn: sqlite3.Connection, session_id: str, after_ns: int) -> list[TurnRow] | None:
    """The session's last turns that ended at or after ``after_ns``, newest first (at most
    PROBLEM_TURNS); None: the ledger could not be read."""
    db = _sqlite3()
    try:
        return conn.execute("SELECT end_ns, outcome, stalled, orphaned_tools FROM turns WHERE session_id = ? "
                            "AND end_ns >= ? ORDER BY end_ns DESC LIMIT ?",
                            (session_id, after_ns, PROBLEM_TURNS)).fetchall()
    except db.Error:
        return None


def killed_agents(conn: sqlite3.Connection, session_id: str, after_ns: int) -> list[int] | None:
    """The end (ns) of each of the session's interrupted subagents that ended at or after
    ``after_ns``; None: the ledger could not be read."""
    db = _sqlite3()
    try:
        return [r[0] for r in conn.execute("SELECT end_ns FROM agents WHERE session_id = ? AND end_ns >= ? "
                                           "AND interrupted ORDER BY end_ns", (session_id, after_ns))]
    except db.Error:
        return None


def problems(turns: list[TurnRow], agents: int) -> list[str]:
    """What went wrong, as ``ccotel run`` recorded it: killed turns, stalled or orphaned tool calls
    (of ``turns``, newest first), ``agents`` interrupted subagents."""
    out: list[str] = []
    for _end, outcome, stalled, orphaned in turns:
        if outcome == "killed":
            out.append("turn killed")
        if stalled:
            out.append(f"{stalled} stalled tool{'s' if stalled != 1 else ''}")
        if orphaned:
            out.append(f"{orphaned} orphaned tool{'s' if orphaned != 1 else ''}")
    if agents:
        out.append(f"{agents} subagent{'s' if agents != 1 else ''} killed")
    return list(dict.fromkeys(out))
