"""Checkpoint stage: what has been delivered, in SQLite under the state dir.

One database, written in one transaction per acknowledged batch:
- files: per transcript its identity (device, inode, fingerprint of the first bytes) and the
  offset before which every line is fully delivered (its spans acknowledged by the backend);
- acked_ids: span ids already delivered for turns still open (a restart re-reads an open turn
  from its first line and must not send those spans again), one row per owner and batch with
  the ids packed (8 bytes each): a row per span made this most of a catch-up's SQLite time.
  (``acked``, one row per span, is what states written before that hold; still read.)
- calls, prompts: digests of API responses and prompts of finished turns, so a history
  replayed into another file after a restart is still counted once;
- counters: the metric totals, so a restart never makes a counter jump or count twice;
- marks: one-off events already counted (a ghost session, a missing subagent transcript).
All SQL lives in this module.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
import threading
from dataclasses import dataclass, field

from .tail import FileIdentity

__all__ = ["State", "Commit", "digest64", "default_state_dir"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, head_len INTEGER, fingerprint TEXT,
    offset INTEGER NOT NULL, read_to INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS acked (span_id INTEGER PRIMARY KEY, owner TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS acked_owner ON acked(owner);
CREATE TABLE IF NOT EXISTS acked_ids (owner TEXT NOT NULL, span_ids BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS acked_ids_owner ON acked_ids(owner);
CREATE TABLE IF NOT EXISTS calls (digest INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS prompts (digest INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS marks (key TEXT PRIMARY KEY);
"""


def digest64(text: str) -> int:
    """A signed 64-bit digest (fits an SQLite INTEGER)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big", signed=True)


def default_state_dir(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ccotel")


@dataclass
class Commit:
    """Everything one transaction writes."""

    offsets: dict[str, tuple[FileIdentity | None, int, int]] = field(default_factory=dict)  # ident, offset, read_to
    forget_files: list[str] = field(default_factory=list)
    acked: list[tuple[int, str]] = field(default_factory=list)
    done_owners: list[str] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    marks: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.offsets or self.forget_files or self.acked or self.done_owners or self.calls
                    or self.prompts or self.counters or self.marks)


class State:
    """Counters are committed as increments: each commit adds what a counter grew by since the
    totals this process loaded (``counters``) or last committed. So the catch-up workers that
    share one state (catchup.py) sum exactly, and a crash loses or repeats nothing."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        os.chmod(state_dir, 0o700)  # transcripts' paths and digests are private
        path = os.path.join(state_dir, "state.db")
        self.fresh = not os.path.exists(path)
        self._committed: dict[str, float] = {}  # counter totals as this process last loaded or wrote them
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                   timeout=60.0)  # several catch-up workers may wait on each other
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"state {path} has schema {row[0]}, this ccotel knows {SCHEMA_VERSION}")
        os.chmod(path, 0o600)

    def files(self) -> dict[str, tuple[FileIdentity | None, int, int]]:
        """path -> (identity, offset of the first line not fully delivered, bytes already read)."""
        out: dict[str, tuple[FileIdentity | None, int, int]] = {}
        for path, dev, ino, head_len, fp, offset, read_to in self._db.execute(
                "SELECT path, dev, ino, head_len, fingerprint, offset, read_to FROM files"):
            ident = FileIdentity(dev, ino, head_len, fp) if fp is not None else None
            out[path] = (ident, offset, read_to)
        return out

    def acked(self) -> set[int]:
        out = {_unsigned(row[0]) for row in self._db.execute("SELECT span_id FROM acked")}
        for (blob,) in self._db.execute("SELECT span_ids FROM acked_ids"):
            out.update(_unpack(blob))
        return out

    def calls(self) -> set[int]:
        return {row[0] for row in self._db.execute("SELECT digest FROM calls")}

    def prompts(self) -> set[int]:
        return {row[0] for row in self._db.execute("SELECT digest FROM prompts")}

    def counters(self) -> dict[str, float]:
        with self._lock:
            totals = dict(self._db.execute("SELECT key, value FROM counters"))
            self._committed.update(totals)
        return totals

    def marks(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT key FROM marks")}

    def commit(self, c: Commit) -> None:
        if c.empty():
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for path, (ident, offset, read_to) in c.offsets.items():
                    db.execute(
                        "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (path, ident.dev if ident else None, ident.ino if ident else None,
                         ident.head_len if ident else None, ident.fingerprint if ident else None, offset,
                         read_to))
                db.executemany("DELETE FROM files WHERE path = ?", ((p,) for p in c.forget_files))
                by_owner: dict[str, list[int]] = {}
                for span_id, owner in c.acked:
                    by_owner.setdefault(owner, []).append(span_id)
                db.executemany("INSERT INTO acked_ids VALUES (?, ?)",
                               ((o, _pack(ids)) for o, ids in by_owner.items()))
                db.executemany("DELETE FROM acked_ids WHERE owner = ?", ((o,) for o in c.done_owners))
                db.executemany("DELETE FROM acked WHERE owner = ?", ((o,) for o in c.done_owners))
                db.executemany("INSERT OR IGNORE INTO calls VALUES (?)", ((d,) for d in c.calls))
                db.executemany("INSERT OR IGNORE INTO prompts VALUES (?)", ((d,) for d in c.prompts))
                added = {k: v - self._committed.get(k, 0.0) for k, v in c.counters.items()}
                db.executemany("INSERT INTO counters VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET"
                               " value = value + excluded.value", ((k, v) for k, v in added.items() if v))
                db.executemany("INSERT OR IGNORE INTO marks VALUES (?)", ((m,) for m in c.marks))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._committed.update(c.counters)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _unsigned(span_id: int) -> int:
    return span_id + (1 << 64) if span_id < 0 else span_id


def _pack(span_ids: list[int]) -> bytes:
    return struct.pack(f">{len(span_ids)}Q", *span_ids)


def _unpack(blob: bytes) -> tuple[int, ...]:
    return struct.unpack(f">{len(blob) // 8}Q", blob[: len(blob) // 8 * 8])
