"""The state in SQLite, under the state dir (``state.db``): one host, one writer.

One database, written in one transaction per acknowledged batch (a ``Commit``, state.py):
- files: per transcript its identity (device, inode, fingerprint of the first bytes), the
  offset before which every line is fully delivered, and the offset marker (tail.Marker: a
  digest of the last bytes read, which tells a rewrite in place);
- acked_ids: span ids already delivered for turns still open, one row per owner and batch with
  the ids packed (8 bytes each). (``acked``, one row per span, is what states written before
  that hold; still read.)
- calls, prompts: digests of API responses and prompts of finished turns;
- counters: the metric totals;
- marks: one-off events already counted.
All SQLite SQL of the state lives in this module; postgres.py is the same interface over
PostgreSQL, for a fleet of hosts sharing one state.

Bounded: each digest and mark is anchored to the file it was read from (``anchor``:
``anchor_of(path)``; a replay adds the copy's file as a second anchor) and goes when its last
file goes (``forget_files``). ``PERMANENT`` rows (the first catch-up's mark) stay. ``acked_ids``
follow open work: they go when their owner is done.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from ccotel.read.tail import FileIdentity, Marker
from ccotel.store.aside import set_aside
from ccotel.store.state import Claimed, Commit, StateError, anchor_of, unpack_ids, unsigned64, write_error_reason
from ccotel.store.statedir import prepare_dir, unwritable

__all__ = ["SqliteState", "SCHEMA_VERSION"]

log = logging.getLogger("ccotel.state")

SCHEMA_VERSION = 3
LEGACY = -1  # the anchor of rows a schema 1 state held (no file known): kept until its files are gone

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, head_len INTEGER, fingerprint TEXT,
    offset INTEGER NOT NULL, read_to INTEGER NOT NULL DEFAULT 0, marker TEXT);
CREATE TABLE IF NOT EXISTS acked (span_id INTEGER PRIMARY KEY, owner TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS acked_owner ON acked(owner);
CREATE TABLE IF NOT EXISTS acked_ids (owner TEXT NOT NULL, span_ids BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS acked_ids_owner ON acked_ids(owner);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value REAL NOT NULL);
"""

# Schema 2: digests and marks carry the file they were read from (see the module docstring).
_ANCHORED = """
CREATE TABLE IF NOT EXISTS calls (digest INTEGER NOT NULL, anchor INTEGER NOT NULL,
    PRIMARY KEY (digest, anchor)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_anchor ON calls(anchor);
CREATE TABLE IF NOT EXISTS prompts (digest INTEGER NOT NULL, anchor INTEGER NOT NULL,
    PRIMARY KEY (digest, anchor)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS prompts_anchor ON prompts(anchor);
CREATE TABLE IF NOT EXISTS marks (key TEXT NOT NULL, anchor INTEGER NOT NULL,
    PRIMARY KEY (key, anchor)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS marks_anchor ON marks(anchor);
CREATE TABLE IF NOT EXISTS legacy_files (path TEXT PRIMARY KEY);
"""

# Schema 1 -> 2: the rows keep their values; with no file known they are anchored to LEGACY and
# go once every file the state knew at the migration is gone (``legacy_files``).
_MIGRATE_1_2 = """
ALTER TABLE calls RENAME TO calls_v1;
ALTER TABLE prompts RENAME TO prompts_v1;
ALTER TABLE marks RENAME TO marks_v1;
""" + _ANCHORED + """
INSERT INTO calls SELECT digest, -1 FROM calls_v1;
INSERT INTO prompts SELECT digest, -1 FROM prompts_v1;
INSERT INTO marks SELECT key, CASE key WHEN 'caught_up' THEN 0 ELSE -1 END FROM marks_v1;
INSERT INTO legacy_files SELECT path FROM files;
DROP TABLE calls_v1;
DROP TABLE prompts_v1;
DROP TABLE marks_v1;
UPDATE meta SET value = '2' WHERE key = 'schema';
"""

# Schema 2 -> 3: checkpoints get the offset marker; those written before have none and are
# trusted as they were (read on from their offset).
_MIGRATE_2_3 = """
ALTER TABLE files ADD COLUMN marker TEXT;
UPDATE meta SET value = '3' WHERE key = 'schema';
"""


class SqliteState:
    """``State`` (state.py) in ``<state dir>/state.db``, for the one ccotel that holds the dir's
    lock and the catch-up workers it forks (run/catchup.py), which wait on each other's
    transactions and, committing counters as increments, sum exactly.

    Faults: a database that is not one, or fails SQLite's quick check, is moved aside to
    ``state.db.corrupt-<UTC time>`` and a new one started (``rebuilt_from`` names the old one):
    ccotel reads the history again as on a first start. A state dir or database that cannot be
    written raises StateUnavailable. A commit that fails (disk full, I/O error, read-only
    remount) is kept and written with the next one (``retry`` writes it alone), so nothing
    acknowledged is lost or counted twice while ccotel runs; ``on_error(reason)`` is told of
    each failed attempt and ``pending`` says how many records wait."""

    def __init__(self, state_dir: str, verify: bool = True) -> None:
        """``verify``: check the database at open (a catch-up worker opens one its parent checked)."""
        prepare_dir(state_dir)
        path = os.path.join(state_dir, "state.db")
        self.path = path
        self.fresh = not os.path.exists(path)
        self.rebuilt_from: str | None = None
        self.on_error: Callable[[str], None] | None = None
        self.failures = 0  # failed commit attempts since the last one written
        self._pending: Commit | None = None  # what failed commits still owe the database
        self._committed: dict[str, float] = {}  # counter totals as this process last loaded or wrote them
        self._lock = threading.Lock()
        try:
            self._db = self._open(path, verify)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) or not verify:
                raise unwritable(state_dir, f"opening {path}", exc) from None
            self.rebuilt_from = _move_aside(path, exc)
            self.fresh = True
            try:
                self._db = self._open(path, verify)
            except sqlite3.DatabaseError as exc2:
                raise unwritable(state_dir, f"opening a new {path}", exc2) from None
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise unwritable(state_dir, f"making {path} private", exc) from None

    @staticmethod
    def _open(path: str, verify: bool) -> sqlite3.Connection:
        """The database at ``path``, created with ccotel's schema if it was not there. One that was
        there without that schema (0 bytes, another program's) raises _NoState: ccotel cannot tell
        an empty file left by a crash in the instant of its creation from a state lost by accident
        (truncated, a copy gone wrong), and either way what was sent before is not known."""
        size = os.path.getsize(path) if os.path.exists(path) else None  # (before SQLite writes a header)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                             timeout=60.0)  # several catch-up workers may wait on each other
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if verify:
                problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("quick_check: " + "; ".join(problems))
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() if _has_meta(db) else None
            if row is None and size is not None and verify:
                raise _no_state(size)
            if row is None:  # created whole or not at all: a crash cannot leave a database without its schema
                db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}{_ANCHORED}INSERT INTO meta VALUES ('schema', "
                                 f"'{SCHEMA_VERSION}');COMMIT;")
                return db
            db.executescript(_SCHEMA)  # tables added without a schema step (acked_ids)
            if int(row[0]) > SCHEMA_VERSION:
                raise StateError(f"state {path} has schema {row[0]}, this ccotel knows {SCHEMA_VERSION}")
            else:
                _migrate(db, path, int(row[0]))
        except BaseException:
            db.close()
            raise
        return db

    def files(self, paths: list[str] | None = None) -> dict[str, tuple[FileIdentity | None, int, int, Marker | None]]:
        """path -> (identity, offset of the first line not fully delivered, bytes already read,
        offset marker); of ``paths`` only, if given."""
        query = "SELECT path, dev, ino, head_len, fingerprint, offset, read_to, marker FROM files"
        rows = self._db.execute(query) if paths is None else itertools.chain.from_iterable(
            self._db.execute(f"{query} WHERE path IN ({','.join('?' * len(chunk))})", chunk)  # noqa: S608
            for chunk in _chunks(paths, 500))
        out: dict[str, tuple[FileIdentity | None, int, int, Marker | None]] = {}
        for path, dev, ino, head_len, fp, offset, read_to, marker in rows:
            ident = FileIdentity(dev, ino, head_len, fp) if fp is not None else None
            out[path] = (ident, offset, read_to, Marker.parse(marker))
        return out

    def acked(self) -> set[int]:
        out = {unsigned64(row[0]) for row in self._db.execute("SELECT span_id FROM acked")}
        for (blob,) in self._db.execute("SELECT span_ids FROM acked_ids"):
            out.update(unpack_ids(blob))
        return out

    def calls(self) -> set[int]:
        return {row[0] for row in self._db.execute("SELECT digest FROM calls")}

    def prompts(self) -> set[int]:
        return {row[0] for row in self._db.execute("SELECT digest FROM prompts")}

    def sorted_digests(self, table: str) -> Iterator[int]:
        """The digests of ``calls`` or ``prompts`` in ascending order, one at a time: a restart
        loads them packed (digests.py), never as a set of them all (several times the packed size)."""
        if table not in ("calls", "prompts"):
            raise ValueError(table)
        return (row[0] for row in self._db.execute(f"SELECT DISTINCT digest FROM {table} ORDER BY digest"))

    def counters(self) -> dict[str, float]:
        with self._lock:
            totals = dict(self._db.execute("SELECT key, value FROM counters"))
            self._committed.update(totals)
        return totals

    def others_counters(self) -> dict[str, float]:
        """What other processes (catch-up workers) added to the counters since this one last loaded
        or wrote them; from here on counted as loaded by this one (its next commits add only its own)."""
        with self._lock:
            totals = dict(self._db.execute("SELECT key, value FROM counters"))
            added = {k: v - self._committed.get(k, 0.0) for k, v in totals.items()}
            self._committed.update(totals)
        return {k: v for k, v in added.items() if v}

    def marks(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT key FROM marks")}

    def held_by(self, paths: list[str]) -> tuple[list[int], list[int]]:
        """The call and prompt digests these files hold (each ascending, once): what a process
        takes over with them from another that read them (a catch-up worker)."""
        anchors = [anchor_of(p) for p in paths]
        out: tuple[set[int], set[int]] = (set(), set())
        for table, into in (("calls", out[0]), ("prompts", out[1])):
            for chunk in _chunks(anchors, 500):
                marks = ",".join("?" * len(chunk))
                into.update(row[0] for row in self._db.execute(
                    f"SELECT digest FROM {table} WHERE anchor IN ({marks})", chunk))  # noqa: S608
        return sorted(out[0]), sorted(out[1])

    def held_only_by(self, paths: list[str]) -> tuple[set[int], set[int], set[str]]:
        """The call digests, prompt digests and marks that no file but these holds: what goes
        from memory when these files go."""
        anchors = [anchor_of(p) for p in paths]
        out: tuple[set[int], set[int], set[str]] = (set(), set(), set())
        for table, column, into in (("calls", "digest", out[0]), ("prompts", "digest", out[1]),
                                    ("marks", "key", out[2])):
            for chunk in _chunks(anchors, 500):
                marks = ",".join("?" * len(chunk))
                into.update(row[0] for row in self._db.execute(
                    f"SELECT a.{column} FROM {table} a WHERE a.anchor IN ({marks}) AND NOT EXISTS"  # noqa: S608
                    f" (SELECT 1 FROM {table} b WHERE b.{column} = a.{column} AND b.anchor NOT IN ({marks}))",
                    chunk + chunk))
        return out

    def claim(self, span_ids: list[int], anchor: int) -> Claimed:
        """Of these spans (built from the file of ``anchor``), the ones this process sends and
        counts. One writer per SQLite state: all of them. (PostgreSQL: the ones no other host
        claimed first; see postgres.py.)"""
        return Claimed(frozenset(span_ids))

    def claim_mark(self, mark: str, anchor: int) -> bool:
        """Does this process count the one-off event ``mark``? One writer per SQLite state: the
        caller's own set of marks decides (True). (PostgreSQL: the first host to insert it.)"""
        return True

    def describe(self) -> str:
        """Where the state is, for logs (never a password)."""
        return self.path

    def sizes(self) -> dict[str, int]:
        """Rows per table, and the database's bytes on disk (with its WAL): what bounded state is measured by."""
        out = {t: int(self._db.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # noqa: S608
               for t in ("files", "acked", "acked_ids", "calls", "prompts", "counters", "marks", "legacy_files")}
        out["bytes"] = sum(os.path.getsize(self.path + s) for s in ("", "-wal") if os.path.exists(self.path + s))
        return out

    @property
    def pending(self) -> int:
        """Records (offsets, span ids, owners) of failed commits not written yet; 0 when all is."""
        with self._lock:
            return self._pending.size() if self._pending is not None else 0

    def commit(self, c: Commit) -> bool:
        """Write ``c`` (after whatever earlier commits failed to write). False if it failed: it is
        kept and written with the next commit or ``retry``."""
        if c.empty() and self._pending is None:
            return True
        with self._lock:
            if self._pending is not None:
                self._pending.merge(c)
                c = self._pending
            return self._write(c)

    def retry(self) -> bool:
        """Write what failed commits left; True if nothing is left."""
        with self._lock:
            return self._pending is None or self._write(self._pending)

    def _write(self, c: Commit) -> bool:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)", c.file_rows())
                db.executemany("DELETE FROM files WHERE path = ?", ((p,) for p in c.forget_files))
                self._forget(db, c.forget_files)
                db.executemany("INSERT INTO acked_ids VALUES (?, ?)", c.acked_by_owner())
                db.executemany("DELETE FROM acked_ids WHERE owner = ?", ((o,) for o in c.done_owners))
                db.executemany("DELETE FROM acked WHERE owner = ?", ((o,) for o in c.done_owners))
                db.executemany("INSERT OR IGNORE INTO calls VALUES (?, ?)", c.calls)
                db.executemany("INSERT OR IGNORE INTO prompts VALUES (?, ?)", c.prompts)
                added = {k: v - self._committed.get(k, 0.0) for k, v in c.counters.items()}
                db.executemany("INSERT INTO counters VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET"
                               " value = value + excluded.value", ((k, v) for k, v in added.items() if v))
                db.executemany("INSERT OR IGNORE INTO marks VALUES (?, ?)", c.marks)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
        except (sqlite3.OperationalError, OSError) as exc:
            self._failed(c, exc)
            return False
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:  # a programming or integrity error: a bug, not a fault
                raise
            self._failed(c, exc)  # corrupt under ccotel: keep running; the next start moves it aside
            return False
        self._committed.update(c.counters)
        if self._pending is not None:
            log.warning("checkpoints written again (after %d failed attempts); nothing was lost", self.failures)
        self._pending = None
        self.failures = 0
        return True

    @staticmethod
    def _forget(db: sqlite3.Connection, paths: list[str]) -> None:
        """Rows held by these files alone go with them (schema 1's rows with the last file it knew)."""
        if not paths:
            return
        anchors = [(anchor_of(p),) for p in paths]
        for table in ("calls", "prompts", "marks"):
            db.executemany(f"DELETE FROM {table} WHERE anchor = ?", anchors)  # noqa: S608
        db.executemany("DELETE FROM legacy_files WHERE path = ?", ((p,) for p in paths))
        if db.execute("SELECT 1 FROM legacy_files LIMIT 1").fetchone() is None:
            for table in ("calls", "prompts", "marks"):
                db.execute(f"DELETE FROM {table} WHERE anchor = ?", (LEGACY,))  # noqa: S608

    def _failed(self, c: Commit, exc: BaseException) -> None:
        self._pending = c
        self.failures += 1
        reason = write_error_reason(exc)
        if self.failures == 1:
            log.error("checkpoint not written to %s (%s: %s); ccotel keeps reading and exporting, keeps what it "
                      "must write in memory and retries with every commit. If it stops before a write succeeds, "
                      "a restart sends the spans delivered since again (same ids)", self.path, reason, exc)
        else:
            log.debug("checkpoint still not written (%s: %s), attempt %d", reason, exc, self.failures)
        if self.on_error is not None:
            self.on_error(reason)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _has_meta(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is not None


def _migrate(db: sqlite3.Connection, path: str, version: int) -> None:
    """Bring a state of an older schema to SCHEMA_VERSION, a step at a time, each in one transaction."""
    if version == 1:
        db.executescript("BEGIN IMMEDIATE;" + _MIGRATE_1_2 + "COMMIT;")
        log.info("state %s migrated from schema 1 to 2 (digests anchored to their files)", path)
        version = 2
    if version == 2:
        db.executescript("BEGIN IMMEDIATE;" + _MIGRATE_2_3 + "COMMIT;")
        log.info("state %s migrated from schema 2 to 3 (offset markers)", path)


class _NoState(sqlite3.DatabaseError):
    """A state.db that holds no ccotel state: 0 bytes, or a database without ccotel's schema."""


def _no_state(size: int) -> _NoState:
    return _NoState("is empty (0 bytes)" if size == 0 else f"holds no ccotel state (a {size}-byte database "
                    "without ccotel's schema)")


def _move_aside(path: str, exc: BaseException) -> str:
    """Move a corrupt or unusable database (and its WAL and shared-memory files) aside
    (aside.set_aside: ``.corrupt-<UTC time>``, ``.unusable-`` for one holding no ccotel state), saying so once."""
    kind = "unusable" if isinstance(exc, _NoState) else "corrupt"
    try:
        aside = set_aside(path, kind)
    except OSError as exc2:
        raise unwritable(os.path.dirname(path), f"moving the {kind} {path} aside", exc2) from None
    what = str(exc) if isinstance(exc, _NoState) else f"is corrupt ({exc})"
    log.error("the state database %s %s; moved it aside to %s and started a new one: the history is read again "
              "as on a first start (counters restart from what it rebuilds, events in the history are not counted "
              "again; traces already delivered are sent again with the same ids)", path, what, aside)
    return aside


T = TypeVar("T")


def _chunks(items: list[T], n: int) -> list[list[T]]:
    return [items[i:i + n] for i in range(0, len(items), n)]
