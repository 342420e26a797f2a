"""The state dir check: its permissions, its database and its lock, as ccotel run and backfill will
find them. Doctor creates and writes nothing there: the database is opened read-only (immutable
when no ccotel left ``-wal``/``-shm`` files, which a read-only open would create).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sqlite3
import stat
import urllib.parse

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, Level
from ccotel.commands.doctor.lock import probe_lock
from ccotel.commands.doctor.wording import user_name
from ccotel.read.procs import cmdline
from ccotel.store.backends import backend_missing
from ccotel.store.sqlite import SCHEMA_VERSION
from ccotel.store.state import default_state_dir, is_url
from ccotel.store.statedir import LOCK_NAME

__all__ = ["check_state"]


def check_state(cfg: DoctorConfig) -> list[Finding]:
    d = cfg.state_dir
    if d is None:
        return [Finding("state", Level.WARN, "--state-dir none", "no checkpoints: every start reads, sends and "
                        "counts the whole history again", "give ccotel a state dir (the default is "
                        f"{default_state_dir(dict(cfg.env))}) unless that is what you want")]
    if is_url(d):
        return [_postgres_state(d)]
    if not os.path.lexists(d):
        return [_state_to_create(d)]
    if not os.path.isdir(d):
        return [Finding("state", Level.FAIL, d, "is not a directory: ccotel run and backfill refuse to start (exit 1)",
                        "remove it or give another --state-dir")]
    return [_state_dir_access(d), *_state_db(d), _state_lock(d, cfg.proc_locks)]


def _postgres_state(url: str) -> Finding:
    """A PostgreSQL state: can ccotel reach it (a connection opened and closed, nothing written)?
    The URL is shown without its password, and any error text is scrubbed of it."""
    missing = backend_missing(url)
    if missing is not None:
        return Finding("state", Level.FAIL, "postgresql://...", missing,
                       "install the fleet extra, or give a --state dir")
    import psycopg

    from ccotel.store.postgres import connect, masked, scrub  # psycopg: only for a PostgreSQL state

    where = masked(url)
    try:
        connect(url).close()
    except psycopg.Error as exc:
        return Finding("state", Level.FAIL, where, f"cannot be reached ({scrub(str(exc).strip(), url)}): ccotel run "
                       "and backfill refuse to start (exit 1)", "check the server, the URL and the password "
                       "(PGPASSWORD, ~/.pgpass)")
    return Finding("state", Level.OK, where, "a PostgreSQL state: the server accepts ccotel's connection")


def _state_to_create(d: str) -> Finding:
    parent = os.path.dirname(os.path.abspath(d))
    while not os.path.exists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
        return Finding("state", Level.OK, d, "does not exist yet: ccotel run creates it (mode 0700) at its first "
                       "start, which reads the whole history")
    return Finding("state", Level.FAIL, d, f"does not exist and cannot be created: {parent} is not writable by "
                   f"{user_name(os.geteuid())}; ccotel run and backfill refuse to start (exit 1)",
                   f"create it for the user ccotel runs as (mkdir -m 700 -p {shlex.quote(d)}), or give another "
                   "--state-dir")


def _state_dir_access(d: str) -> Finding:
    st = os.stat(d)
    mode = stat.S_IMODE(st.st_mode)
    me = os.geteuid()
    data = {"mode": f"{mode:04o}", "owner": user_name(st.st_uid)}
    if not os.access(d, os.W_OK | os.X_OK):
        return Finding("state", Level.FAIL, d, f"cannot be written by {user_name(me)} (owner "
                       f"{user_name(st.st_uid)}, mode {mode:04o}): ccotel run and backfill refuse to start (exit 1)",
                       f"run ccotel as {user_name(st.st_uid)}, or give another --state-dir", data)
    if mode != 0o700:
        if st.st_uid != me and me != 0:
            return Finding("state", Level.FAIL, d, f"mode {mode:04o} and owned by {user_name(st.st_uid)}: ccotel run "
                           "cannot make it private (0700) and refuses to start (exit 1)",
                           f"run ccotel as {user_name(st.st_uid)}, or chmod 700 {shlex.quote(d)} as them", data)
        return Finding("state", Level.WARN, d, f"mode {mode:04o}, not 0700: others can read which transcripts exist "
                       "(ccotel run makes it 0700 when it starts)", f"chmod 700 {shlex.quote(d)}", data)
    return Finding("state", Level.OK, d, f"writable, mode 0700, owner {user_name(st.st_uid)}", "", data)


def _state_db(d: str) -> list[Finding]:
    path = os.path.join(d, "state.db")
    if not os.path.exists(path):
        return [Finding("state", Level.OK, path, "no database yet: the first start reads (and sends) the whole "
                        "history")]
    size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    # Read-only SQLite creates missing -wal/-shm files (as the user running doctor): when no ccotel
    # left them there, open the file as immutable instead; nothing is being written to it then.
    live = os.path.exists(path + "-wal") and os.path.exists(path + "-shm")
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro" + ("" if live else "&immutable=1")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=1.0)
    except sqlite3.Error as exc:
        return [_db_unreadable(path, exc)]
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            return [Finding("state", Level.WARN, path, f"fails SQLite's quick check ({'; '.join(problems)}): the next "
                            "ccotel run moves it aside (state.db.corrupt-<time>) and reads the history again; traces "
                            "are sent again with the same ids, counters start from the rebuilt totals",
                            "nothing to do (or restore a backup of it before the next start)", {"bytes": size})]
        schema = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        checkpointed = db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "no such table" not in str(exc):
            return [_db_unreadable(path, exc)]
        return [Finding("state", Level.WARN, path, f"is not a ccotel state database ({exc}): the next ccotel run "
                        "moves it aside and reads the history again", "nothing to do, or give another --state-dir",
                        {"bytes": size})]
    finally:
        db.close()
    data = {"bytes": size, "schema": schema[0] if schema else None, "files_checkpointed": checkpointed}
    version = int(schema[0]) if schema and str(schema[0]).isdigit() else None
    if version is None or version > SCHEMA_VERSION:
        return [Finding("state", Level.FAIL, path, f"schema {schema[0] if schema else 'missing'}, this ccotel knows "
                        f"{SCHEMA_VERSION}: ccotel run and backfill refuse it",
                        "use the ccotel version that wrote it, or give another --state-dir", data)]
    if version < SCHEMA_VERSION:
        return [Finding("state", Level.OK, path, f"opens read-only, schema {version}: the next ccotel run migrates it "
                        f"to schema {SCHEMA_VERSION} in place, its checkpoints kept; {checkpointed} files "
                        "checkpointed", "", data)]
    return [Finding("state", Level.OK, path, f"opens read-only, schema {SCHEMA_VERSION}, {size / 1e6:.1f} MB, "
                    f"{checkpointed} files checkpointed", "", data)]


def _db_unreadable(path: str, exc: BaseException) -> Finding:
    return Finding("state", Level.FAIL, path, f"cannot be opened read-only ({exc}): ccotel run and backfill refuse "
                   "to start (exit 1)", "run ccotel (and doctor) as the user who owns the state dir, or give "
                   "another --state-dir")


def _state_lock(d: str, proc_locks: str) -> Finding:
    path = os.path.join(d, LOCK_NAME)
    probe = probe_lock(path, proc_locks)
    data = dataclasses.asdict(probe)
    if not probe.exists:
        return Finding("state", Level.OK, path, "no lock file: no ccotel has run on this state dir", "", data)
    if probe.held:
        who = f"pid {probe.holder}" if probe.holder else "a process whose pid is not known"
        cmd = cmdline(probe.holder) if probe.holder else ""
        return Finding("state", Level.OK, path, f"held by {who}{f' ({cmd})' if cmd else ''}: a ccotel runs on this "
                       "state dir; a second ccotel run or backfill on it would exit 75",
                       "", data)
    last = f" (last held by pid {probe.holder})" if probe.holder else ""
    return Finding("state", Level.OK, path, f"free: no ccotel runs on this state dir{last}", "", data)
