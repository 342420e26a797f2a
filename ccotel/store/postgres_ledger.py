"""The usage ledger over PostgreSQL (``--state postgresql://...``): one ledger for a fleet.

The same interface as the SQLite ``Ledger`` (ledger.py), in the schema ``ccotel_ledger`` of the
state's database (created and versioned with the state's own tables: postgres.migrate). Every
host writes its calls, tools, subagents and turns into the same tables, keyed as in ledger.db,
so a call recorded by two hosts (a synced file) is one row, and ``ccotel report`` on any host
sums the whole fleet.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from ccotel.store.ledger import UPSERT_CALL_SET, Ledger, LedgerError, LedgerWriteError
from ccotel.store.postgres import Link, masked, migrate, scrub
from ccotel.store.state import StateError

if TYPE_CHECKING:
    from ccotel.store.ledger_rows import Rows

__all__ = ["PgLedger", "open_report_ledger"]

log = logging.getLogger("ccotel.state")


class PgLedger(Ledger):
    """The usage ledger in PostgreSQL (schema ``ccotel_ledger``), shared by the fleet: ``ccotel
    report`` on any host sums every host's calls. The roots it covers and its last write are kept
    per host. A failed write (the server away) keeps its rows and writes them with the next one
    (the upserts are idempotent) or at ``close``."""

    MAX_BACKLOG = 200_000  # rows kept while the server is away (then the oldest are dropped, counted)

    def __init__(self, url: str, host: str, roots: Sequence[str] = (), clock: Any = time.time_ns) -> None:  # noqa: D107
        self.path = masked(url)
        self.url = url
        self.host = host
        self.clock = clock
        self._link = Link(url)
        self._backlog: list[Rows] = []
        try:
            self._link.run(lambda c: migrate(c, self.path))
        except (psycopg.Error, StateError) as exc:
            raise LedgerError(f"{self.path}: {scrub(str(exc).strip(), url)}") from None
        self._add_roots(roots)

    def _write(self, rows: Rows) -> None:
        self._backlog.append(rows)
        while sum(len(r) for b in self._backlog for r in b) > self.MAX_BACKLOG and len(self._backlog) > 1:
            self._backlog.pop(0)
        try:
            self._link.run(self._write_backlog)
        except psycopg.Error as exc:
            raise LedgerWriteError(self._link.error(exc)) from None
        self._backlog = []

    def _write_backlog(self, c: psycopg.Connection[Any]) -> None:
        with c.transaction():
            cur = c.cursor()
            for calls, tools, agents, turns in self._backlog:
                if calls:
                    cur.executemany(_PG_UPSERT_CALL, calls)
                for sql, rows in ((_PG_UPSERT_TOOL, tools), (_PG_UPSERT_AGENT, agents), (_PG_UPSERT_TURN, turns)):
                    if rows:
                        cur.executemany(sql, rows)
            self._set_meta_in(c, "updated_ns", str(self.clock()))

    def filling(self, why: str | None) -> None:
        """The mark alone: PostgreSQL's ledger keeps no totals."""
        self._set_meta("filling", why or "")

    def end_filling_aside(self) -> None:
        """The mark alone, here: there are no totals to make again."""
        self.filling(None)

    def close(self, wait_s: float | None = None) -> None:
        deadline = time.monotonic() + 5.0
        while self._backlog and time.monotonic() < deadline:
            try:
                self._link.run(self._write_backlog)
                self._backlog = []
            except psycopg.Error:
                time.sleep(0.2)
        if self._backlog:
            log.error("usage ledger %s: %d batches of rows could not be written (the server is away)", self.path,
                      len(self._backlog))
        self._link.close()

    def _rows(self, sql: str, args: Sequence[Any]) -> Iterator[Sequence[Any]]:
        pg = sql.replace("?", "%s").replace(" FROM calls", " FROM ccotel_ledger.calls") \
            .replace(" FROM tools", " FROM ccotel_ledger.tools").replace(" FROM agents", " FROM ccotel_ledger.agents") \
            .replace(" FROM turns", " FROM ccotel_ledger.turns")
        try:
            return iter(self._link.run(lambda c: c.execute(pg.encode(), list(args)).fetchall()))
        except psycopg.Error as exc:
            raise LedgerError(f"{self.path}: {self._link.error(exc)}") from None

    def _meta(self, key: str) -> str | None:
        try:
            row = self._link.run(lambda c: c.execute("SELECT value FROM ccotel_ledger.meta WHERE key = %s",
                                                     (f"{key}@{self.host}",)).fetchone())
        except psycopg.Error as exc:
            raise LedgerError(f"{self.path}: {self._link.error(exc)}") from None
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._link.run(lambda c: self._set_meta_in(c, key, value))

    def _set_meta_in(self, c: psycopg.Connection[Any], key: str, value: str) -> None:
        c.execute("INSERT INTO ccotel_ledger.meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = "
                  "excluded.value", (f"{key}@{self.host}", value))


_PG_UPSERT_CALL = ("INSERT INTO ccotel_ledger.calls AS calls VALUES (" + ",".join(["%s"] * 19) + ") "
                   "ON CONFLICT (key) DO UPDATE SET time_ns = greatest(calls.time_ns, excluded.time_ns),"
                   + UPSERT_CALL_SET)


def _replace(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return (f"INSERT INTO ccotel_ledger.{table} VALUES ({','.join(['%s'] * len(columns))}) "  # noqa: S608
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}")


_PG_UPSERT_TOOL = _replace("tools", ("session_id", "tool_use_id", "time_ns", "end_ns", "name", "agent_id",
                                     "error_type", "repaired"), ("session_id", "tool_use_id"))
_PG_UPSERT_AGENT = _replace("agents", ("session_id", "agent_key", "time_ns", "end_ns", "agent_type", "background",
                                       "interrupted"), ("session_id", "agent_key"))
_PG_UPSERT_TURN = _replace("turns", ("session_id", "span_id", "time_ns", "end_ns", "cwd", "project", "version",
                                     "outcome", "api_calls", "tool_calls", "api_errors", "orphaned_tools",
                                     "lost_tools", "stalled"), ("session_id", "span_id"))


def open_report_ledger(url: str, host: str, roots: Sequence[str]) -> PgLedger | None:
    """The shared ledger for ``ccotel report`` on this host: if this host's ccotel recorded
    exactly these roots (as report.open_ledger asks of a ledger.db), else None (the report then
    reads the transcripts). Its rows are the whole fleet's: a session that moved between hosts
    is reported whole on either."""
    try:
        ledger = PgLedger(url, host)
    except LedgerError as exc:
        log.warning("ledger not used: %s", exc)
        return None
    if ledger.coverage().roots != frozenset(os.path.realpath(r) for r in roots):
        ledger.close()
        return None
    return ledger
