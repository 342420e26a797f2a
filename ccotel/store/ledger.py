"""The usage ledger: one row per API call, kept after Claude Code deletes its transcripts.

Claude Code deletes transcripts older than ``cleanupPeriodDays`` (30 by default), and every
transcript reader forgets that history with them. The ledger is written as ccotel reads (the
pipeline hands it the spans it builds), in a SQLite file of its own (``ledger.db`` in the state
dir, beside ``state.db``): the working state stays bounded, the ledger is history on purpose and
grows by about one row per API call.

Tables (schema version in ``meta``):

- ``calls``: one row per API call, keyed by its identity (``rules.call_key``: message id +
  request id; an advisor call consulted during a response is ``<key>#advisor<i>``, as the
  report's transcript reader names it), so recording the same call again (a backfill over the
  same files, a restart) never counts it twice: the row keeps the later snapshot of its usage
  (``rules.snapshot_rank``) and the session that recorded it first.
- ``tools``, ``agents``, ``turns``: one row per tool call, subagent and turn, keyed by session
  and tool_use id, agent id and turn span id: the report's tool calls, tool errors, subagents
  and the health of a row (orphans, kills, resets, ghost sessions).

Times are Unix ns. A call's ``time_ns`` is its response's last line (the chat span's end): the
report buckets calls by it, from the ledger and from transcripts alike.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ccotel.store.ledger_schema import (
    FILL_TOOL_TOTALS,
    FILL_TOTALS,
    SCHEMA,
    SLOT_NS,
    TOTALS,
    TOTALS_TRIGGERS,
    USAGE,
    split_sql,
)

if TYPE_CHECKING:  # the write side's imports (rules, records: slow to import) are not the report's
    import logging
    import threading

    from ccotel.records import SpanRecord, Usage
    from ccotel.store.ledger_rows import Rows

__all__ = ["LEDGER_FILE", "SCHEMA_VERSION", "CallRow", "Ledger", "LedgerError", "LedgerCorrupt", "LedgerWriteError",
           "FILLING_CATCH_UP", "FILLING_REBUILD", "ToolRow", "TurnRow", "AgentRow", "UPSERT_CALL_SET", "SLOT_NS",
           "nano_usd"]

LEDGER_FILE = "ledger.db"
# Why a ledger holds only part of the history on disk (meta ``filling``; reports then read every
# transcript): the first catch-up fills it along with the state; a rebuild fills it from the
# transcripts (a ledger set aside, or one the state predates) before anything else is read.
FILLING_CATCH_UP = "catch-up"
FILLING_REBUILD = "rebuild"
SCHEMA_VERSION = 2  # 2: call_totals, kept by triggers
def nano_usd(cost: float) -> int:
    """A cost in USD as an integer of nano-dollars, as SQLite's ``CAST(round(cost * 1e9) AS
    INTEGER)`` makes it (half away from zero, truncating casts; |cost| below 9e9 USD): report
    costs are summed as these integers, exactly and in any order, in SQLite and in Python alike."""
    x = cost * 1e9
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


# A later snapshot of a call replaces the row (larger output, then larger total: rules.snapshot_rank);
# the session, start and project stay those of the first record.
UPSERT_CALL_SET = """
    model = coalesce(excluded.model, calls.model),
    api_error = excluded.api_error, input = excluded.input, output = excluded.output,
    cache_read = excluded.cache_read, cache_write = excluded.cache_write,
    cache_write_5m = excluded.cache_write_5m, cache_write_1h = excluded.cache_write_1h,
    reasoning = excluded.reasoning, cost = excluded.cost, priced = excluded.priced
WHERE (excluded.output, excluded.input + excluded.output + excluded.cache_read + excluded.cache_write)
    > (calls.output, calls.input + calls.output + calls.cache_read + calls.cache_write)
"""
_UPSERT_CALL = """
INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT (key) DO UPDATE SET
    time_ns = max(calls.time_ns, excluded.time_ns),""" + UPSERT_CALL_SET
# Tools, agents and turns: the latest span is the fullest view (a result that came after a restart).
# (an upsert rather than INSERT OR REPLACE: a replace's delete fires no trigger, and tool_totals needs it)
_UPSERT_TOOL = """INSERT INTO tools VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (session_id, tool_use_id) DO UPDATE SET
    time_ns = excluded.time_ns, end_ns = excluded.end_ns, name = excluded.name, agent_id = excluded.agent_id,
    error_type = excluded.error_type, repaired = excluded.repaired"""
# The page cache of a process that writes the ledger, in KiB (SQLite's default is 2,000).
WRITER_CACHE_KIB = 8_000
_UPSERT_AGENT = "INSERT OR REPLACE INTO agents VALUES (?,?,?,?,?,?,?)"
_UPSERT_TURN = "INSERT OR REPLACE INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


class LedgerError(RuntimeError):
    """The ledger cannot be used (another schema version, not a database)."""


class LedgerCorrupt(LedgerError):
    """The file is damaged (not a database, fails SQLite's quick check, or emptied): a writer sets it
    aside and rebuilds the ledger (ledger_recovery.py); another schema version is not this."""


class LedgerWriteError(sqlite3.OperationalError):
    """A write to a ledger on another backend failed (PostgreSQL away): an sqlite3.Error, so the
    pipeline counts it as it counts a failed SQLite write (its rows are kept and written again)."""


class CallRow(NamedTuple):
    """One API call as the report sums it (from the ledger or read from a transcript)."""

    key: str
    session_id: str
    time_ns: int
    model: str | None
    agent_id: str | None
    project: str | None
    cwd: str | None
    api_error: bool
    # input, output, cache read, cache write, cache write 5m, cache write 1h, reasoning
    usage: tuple[int, int, int, int, int, int, int]
    cost: float | None  # None: no price for its model (or a failed call)


class ToolRow(NamedTuple):
    session_id: str
    tool_use_id: str
    time_ns: int
    name: str
    agent_id: str | None
    error_type: str | None  # None: it worked
    repaired: bool


class AgentRow(NamedTuple):
    session_id: str
    agent_key: str
    time_ns: int
    agent_type: str
    background: bool
    interrupted: bool


class TurnRow(NamedTuple):
    session_id: str
    span_id: str
    time_ns: int
    end_ns: int
    cwd: str | None
    project: str | None
    outcome: str
    api_calls: int
    orphaned_tools: int
    lost_tools: int


def _log() -> logging.Logger:
    import logging  # writers only (see end_filling_aside)

    return logging.getLogger("ccotel.ledger")


class Coverage(NamedTuple):
    """What the ledger holds: ``updated_ns`` when it was last written (0: never), ``calls`` rows,
    ``roots`` the Claude config dirs its spans were read from, ``filling``: why it holds only part
    of the transcripts' history yet (a first catch-up or a rebuild still running), or None."""

    updated_ns: int
    calls: int
    roots: frozenset[str]
    filling: str | None = None


class Ledger:
    """``ledger.db``: ``record(spans)`` as the pipeline builds them, read back by ``ccotel report``."""

    _ending: threading.Thread | None = None  # end_filling_aside's thread

    def __init__(self, path: str, roots: Sequence[str] = (), clock: Any = time.time_ns, verify: bool = False) -> None:
        """Open (or create) the ledger at ``path`` (``:memory:`` for a throwaway one). ``roots``:
        the Claude config dirs the spans come from; the report uses the ledger only for them.
        ``verify``: check the file first (a writer's start, once): LedgerCorrupt if it is damaged.
        ``created``: the file was made by this open (it did not exist)."""
        self.path = path
        self.clock = clock
        self._backlog: list[Rows] = []  # rows of failed writes, written with the next one
        self._writing = False  # the writer's page cache is set (at the first write)
        self.created = path == ":memory:" or not os.path.exists(path)
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
            if verify and not self.created and os.path.getsize(path) == 0:  # SQLite takes it for a new one
                raise LedgerCorrupt(f"{path}: an empty file (0 bytes)")
        try:
            self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            if path != ":memory:":
                os.chmod(path, 0o600)  # sessions, projects and usage: private like the state
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            if verify:
                problems = [row[0] for row in self.db.execute("PRAGMA quick_check(3)")]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("quick_check: " + "; ".join(problems))
            version = self._meta("schema_version")
            if version is None:
                self.db.executescript(f"BEGIN IMMEDIATE; {SCHEMA}; INSERT OR REPLACE INTO meta VALUES "
                                      f"('schema_version', '{SCHEMA_VERSION}'); COMMIT;")
            elif version == "1":
                self._upgrade_from_1()
            elif version != str(SCHEMA_VERSION):
                raise LedgerError(f"{path}: ledger schema {version}, this ccotel reads {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            if hasattr(self, "db"):
                self.db.close()
            if isinstance(exc, sqlite3.OperationalError):  # cannot be opened (permissions, I/O): not damage
                raise LedgerError(f"{path}: {exc}") from exc
            raise LedgerCorrupt(f"{path}: {exc}") from exc
        self._add_roots(roots)

    def _add_roots(self, roots: Sequence[str]) -> None:
        """Add these config dirs to the ones the ledger covers (the report uses it for them only)."""
        if roots:
            known = set(self.coverage().roots)
            new = {os.path.realpath(r) for r in roots} - known
            if new:
                self._set_meta("roots", "\n".join(sorted(known | new)))

    def _upgrade_from_1(self) -> None:
        """Schema 1 -> 2: the totals table and its triggers, filled from the calls, in one
        transaction (a concurrent opener waits, then finds schema 2)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if self._meta("schema_version") == "1":
                for statement in split_sql(TOTALS):
                    self.db.execute(statement)
                self.db.execute(FILL_TOTALS)
                self.db.execute(FILL_TOOL_TOTALS)
                self._set_meta("schema_version", str(SCHEMA_VERSION))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @classmethod
    def in_state_dir(cls, state_dir: str, roots: Sequence[str] = ()) -> Ledger:
        return cls(os.path.join(state_dir, LEDGER_FILE), roots)

    # -- writing -------------------------------------------------------------------

    def record(self, spans: Sequence[SpanRecord]) -> None:
        """Add what these spans say (chat, execute_tool, invoke_agent and turn spans as spans/build.py
        builds them; anything else is ignored). Recording the same spans again changes nothing."""
        from ccotel.store.ledger_rows import rows_of  # loaded by the writers only, not by a report

        self.record_rows(rows_of(spans))

    def record_rows(self, rows: Rows) -> None:
        """``record`` of the spans these rows are of (ledger_rows.rows_of)."""
        if any(rows) or self._backlog:
            self._write(rows)

    @property
    def pending(self) -> int:
        """Rows of failed writes not written yet (a full disk): 0 when every row is in."""
        return sum(len(r) for batch in self._backlog for r in batch)

    def retry(self) -> bool:
        """Write the rows failed writes left (sqlite3.Error if it fails again); True if none is left."""
        if self._backlog:
            self._write(([], [], [], []))
        return not self._backlog

    def _write(self, rows: Rows) -> None:
        """Write ``rows`` after those of failed writes (kept, in order: the upserts are idempotent);
        if this fails too, they all wait for the next write."""
        self._backlog.append(rows)
        if not self._writing:
            self._writing = True
            # A writer's calls land on random leaves of the call key's index: once the ledger
            # outgrows SQLite's default page cache, most inserts read their page again. A report
            # only reads, and keeps the default.
            self.db.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        try:
            with self._transaction():
                for calls, tools, agents, turns in self._backlog:
                    self.db.executemany(_UPSERT_CALL, calls)
                    self.db.executemany(_UPSERT_TOOL, tools)
                    self.db.executemany(_UPSERT_AGENT, agents)
                    self.db.executemany(_UPSERT_TURN, turns)
                self._set_meta("updated_ns", str(self.clock()))
        except BaseException:
            if not any(rows):
                self._backlog.pop()
            raise
        self._backlog = []

    def filling(self, why: str | None) -> None:
        """Say (``why``) that the ledger holds only part of the history on disk until this is called
        with None: a first catch-up or a rebuild is filling it. Reports then read every transcript,
        never the totals: while it is filled, the triggers that keep them row by row are dropped
        (for every writer: they are the file's schema), and its end makes the totals again from the
        calls and tools, with the triggers, in the transaction that clears the mark. A fill stopped
        midway leaves the mark, so whatever writes the ledger until an end is never read as totals."""
        with self._transaction():
            if why:
                for name in TOTALS_TRIGGERS:
                    self.db.execute(f"DROP TRIGGER IF EXISTS {name}")
            else:
                for statement in split_sql(TOTALS):  # IF NOT EXISTS: the tables and index are there
                    self.db.execute(statement)
                self.db.execute("DELETE FROM call_totals")
                self.db.execute("DELETE FROM tool_totals")
                self.db.execute(FILL_TOTALS)
                self.db.execute(FILL_TOOL_TOTALS)
            self._set_meta("filling", why or "")

    def end_filling_aside(self) -> None:
        """``filling(None)`` on a connection of its own, in a thread: the end of ccotel run's first
        catch-up. Making the totals again reads every call (long, for a large history) while ccotel run
        follows the live sessions; sqlite3 lets go of the GIL while the statement runs. Until it is
        done (``busy``) the caller writes nothing here (its rows wait, and the checkpoints for them);
        ``close`` waits for it. A failure leaves the mark: reports read every transcript, never wrong."""
        if self.path == ":memory:":  # another connection would be another ledger
            self.filling(None)
            return
        import threading  # writers only: a report from the ledger loads neither threading nor logging

        self._ending = threading.Thread(target=self._end_filling, name="ccotel-ledger-totals", daemon=True)
        self._ending.start()

    @property
    def busy(self) -> bool:
        """``end_filling_aside`` is still making the totals: write nothing yet."""
        return self._ending is not None and self._ending.is_alive()

    def _end_filling(self) -> None:
        try:
            apart = Ledger(self.path)
            try:
                apart.filling(None)
            finally:
                apart.close()
        except (sqlite3.Error, LedgerError) as exc:
            _log().debug("usage ledger still marked as filling: %s", exc)

    def still_filling(self) -> str | None:
        """Why the ledger holds only part of the history on disk yet (``filling``), or None."""
        return self._meta("filling") or None

    def close(self, wait_s: float | None = None) -> None:
        """``wait_s``: how long ``end_filling_aside`` may still take (None: until it is done). One
        cut short (a stop) leaves the mark, and the next start makes the totals."""
        if self._ending is not None:
            self._ending.join(wait_s)
            if self._ending.is_alive():
                _log().info("usage ledger: the totals are made again at the next start")
        self.db.close()

    # -- reading -------------------------------------------------------------------

    def coverage(self) -> Coverage:
        roots = self._meta("roots")
        count = next(iter(self._rows("SELECT count(*) FROM calls", [])))[0]
        return Coverage(int(self._meta("updated_ns") or 0), int(count),
                        frozenset(roots.split("\n")) if roots else frozenset(), self.still_filling())

    def calls(self, after_ns: int | None = None, before_ns: int | None = None) -> Iterator[CallRow]:
        """Every call (failed ones too), oldest first; ``after_ns``/``before_ns`` bound its time."""
        sql, args = _window("SELECT key, session_id, time_ns, model, agent_id, project, cwd, api_error, input, output, "
                            "cache_read, cache_write, cache_write_5m, cache_write_1h, reasoning, cost FROM calls",
                            after_ns, before_ns)
        for r in self._rows(sql + " ORDER BY time_ns", args):
            yield CallRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), tuple(r[8:15]), r[15])

    def call_usage(self, key: str) -> tuple[str | None, Usage] | None:
        """(model, usage) of a call as recorded, or None if it is not: what a correction of it
        after a restart is the difference from."""
        from ccotel.records import Usage  # the write side's (see the imports above)

        for r in self._rows("SELECT model, input, output, cache_read, cache_write, cache_write_5m, cache_write_1h, "
                            "reasoning FROM calls WHERE key = ?", [key]):
            return r[0], Usage(r[1], r[2], r[3], r[4], r[5], r[6], r[7])
        return None

    def call_keys(self) -> set[str]:
        return {r[0] for r in self._rows("SELECT key FROM calls", [])}

    def tools(self, after_ns: int | None = None, before_ns: int | None = None) -> Iterator[ToolRow]:
        sql, args = _window("SELECT session_id, tool_use_id, time_ns, name, agent_id, error_type, repaired FROM tools",
                            after_ns, before_ns)
        for r in self._rows(sql, args):
            yield ToolRow(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))

    def agents(self, after_ns: int | None = None, before_ns: int | None = None) -> Iterator[AgentRow]:
        sql, args = _window("SELECT session_id, agent_key, time_ns, agent_type, background, interrupted FROM agents",
                            after_ns, before_ns)
        for r in self._rows(sql, args):
            yield AgentRow(r[0], r[1], r[2], r[3], bool(r[4]), bool(r[5]))

    def turns(self, after_ns: int | None = None, before_ns: int | None = None) -> Iterator[TurnRow]:
        sql, args = _window("SELECT session_id, span_id, time_ns, end_ns, cwd, project, outcome, api_calls, "
                            "orphaned_tools, lost_tools FROM turns", after_ns, before_ns)
        for r in self._rows(sql, args):
            yield TurnRow(*r)

    def sessions_with_calls(self) -> set[str]:
        return {r[0] for r in self._rows("SELECT DISTINCT session_id FROM calls", [])}

    # -- sums: a report the ledger answers alone (SQLite only) ---------------------
    # Each takes ``slot_ns``: rows are also grouped by ``time_ns // slot_ns`` (the report's
    # date lookups are per quarter hour), None: by session alone.

    def call_totals(self, by_slot: bool) -> list[tuple[Any, ...]]:
        """Per (session, model, failed, slot), from the totals the triggers keep: session, model
        (None for NULL), failed (0/1), slot (0 unless ``by_slot``), calls, the seven usage sums (as
        CallRow.usage), calls with a cost, their cost in nano-dollars (nano_usd), the earliest
        non-zero time (None: none) and the latest time."""
        sums = ", ".join(f"sum({u})" for u in USAGE)
        rows = self.db.execute(
            "SELECT session_id, model, failed, slot, calls, " + ", ".join(USAGE)
            + ", priced, cost_nano, first_ns, last_ns FROM call_totals" if by_slot else
            f"SELECT session_id, model, failed, 0, sum(calls), {sums}, sum(priced), sum(cost_nano), min(first_ns), "
            "max(last_ns) FROM call_totals GROUP BY session_id, model, failed").fetchall()
        return [(r[0], r[1] or None, *r[2:]) for r in rows]

    def session_places(self) -> list[tuple[str, int, int, str | None, str | None]]:
        """(session, time, rowid, project, cwd) of each session's first call, its first call with
        a project and its first with a cwd, in ``calls()``'s order (time, then rowid): where a
        session ran (report._where) is decided by these three calls alone."""
        first = [f"SELECT (SELECT rowid FROM calls WHERE session_id = s.session_id{cond} ORDER BY time_ns, rowid "
                 "LIMIT 1) FROM (SELECT DISTINCT session_id FROM call_totals) s"
                 for cond in ("", " AND project != ''", " AND cwd != ''")]
        return self.db.execute(
            f"SELECT session_id, time_ns, rowid, project, cwd FROM calls WHERE rowid IN ({' UNION '.join(first)}) "
            "ORDER BY time_ns, rowid").fetchall()

    def first_call(self, session_id: str, from_ns: int) -> tuple[int, int]:
        """(time, rowid) of the session's first call at or after ``from_ns``, in ``calls()``'s
        order ((0, 0) if none)."""
        row = self.db.execute("SELECT time_ns, rowid FROM calls WHERE session_id = ? AND time_ns >= ? "
                              "ORDER BY time_ns, rowid LIMIT 1", (session_id, from_ns)).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def tool_sums(self, slot_ns: int | None) -> list[tuple[Any, ...]]:
        """Per (session, slot), by session then slot, from the totals the triggers keep: session,
        slot (0 when ``slot_ns`` is None, else the quarter hour), tool calls, failed ones, orphaned
        or repaired ones."""
        if slot_ns is not None and slot_ns != SLOT_NS:
            raise ValueError(f"tool totals are kept per {SLOT_NS} ns, not {slot_ns}")
        return self.db.execute(
            "SELECT session_id, slot, tools, failed, orphaned FROM tool_totals ORDER BY session_id, slot"
            if slot_ns is not None else
            "SELECT session_id, 0, sum(tools), sum(failed), sum(orphaned) FROM tool_totals GROUP BY session_id "
            "ORDER BY session_id").fetchall()

    def agent_sums(self, slot_ns: int | None) -> list[tuple[Any, ...]]:
        """Per (session, slot), in the order of ``agents()`` by session: session, slot, subagents."""
        slot = _slot_sql(slot_ns)
        return self.db.execute(
            f"SELECT session_id, {slot} AS slot, count(*) FROM agents GROUP BY session_id, slot "
            "ORDER BY session_id, slot").fetchall()

    def marked_turns(self) -> list[tuple[str, int, int, int]]:
        """(session, time, killed, reset) of each killed turn and each reset one (lost_tools > 0),
        by time then span id (as summary.in_time_order)."""
        return self.db.execute(
            "SELECT session_id, time_ns, outcome = 'killed', lost_tools > 0 FROM turns "
            "WHERE outcome = 'killed' OR lost_tools > 0 ORDER BY time_ns, span_id").fetchall()

    def turn_times(self, slot_ns: int | None) -> list[tuple[Any, ...]]:
        """Per (session, slot): session, slot, its turns' earliest non-zero time (None: none), latest."""
        return self.db.execute(
            f"SELECT session_id, {_slot_sql(slot_ns)} AS slot, min(CASE WHEN time_ns != 0 THEN time_ns END), "
            "max(time_ns) FROM turns GROUP BY session_id, slot").fetchall()

    def first_turns(self) -> dict[str, int]:
        """Each session without a call: its first turn's time, in the order of those first turns
        (time, then span id)."""
        first: dict[str, int] = {}
        for sid, time_ns in self.db.execute(
                "SELECT session_id, time_ns FROM turns WHERE session_id NOT IN (SELECT session_id FROM call_totals) "
                "ORDER BY time_ns, span_id"):
            first.setdefault(sid, time_ns)
        return first

    def turn_places(self, sessions: Sequence[str]) -> list[tuple[str, str | None, str | None]]:
        """(session, project, cwd) of each turn of ``sessions`` and of the sessions without a call,
        in time order (ties by span id, as summary.in_time_order)."""
        return self.db.execute(
            "SELECT session_id, project, cwd FROM turns WHERE session_id IN (SELECT value FROM json_each(?)) "
            "OR session_id NOT IN (SELECT session_id FROM call_totals) ORDER BY time_ns, span_id",
            (json.dumps(list(sessions)),)).fetchall()

    # -- internals (postgres_ledger.PgLedger: the same over PostgreSQL) -----------

    def _rows(self, sql: str, args: Sequence[Any]) -> Iterator[Sequence[Any]]:
        return iter(self.db.execute(sql, args))

    def _meta(self, key: str) -> str | None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return None  # a new file: no meta table yet
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self.db.execute("COMMIT")
                return
        except sqlite3.Error:
            self._rollback()  # a COMMIT that failed (a full disk) leaves the transaction open
            raise
        self._rollback()

    def _rollback(self) -> None:
        if self.db.in_transaction:  # SQLite may have rolled back itself
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def _slot_sql(slot_ns: int | None) -> str:
    """SQL for Python's ``time_ns // slot_ns`` (floor, also below zero: SQLite's / truncates), or 0."""
    if slot_ns is None:
        return "0"
    n = int(slot_ns)
    return f"(CASE WHEN time_ns >= 0 THEN time_ns / {n} ELSE -((-time_ns + {n - 1}) / {n}) END)"


def _window(sql: str, after_ns: int | None, before_ns: int | None) -> tuple[str, list[int]]:
    where, args = [], []
    if after_ns is not None:
        where.append("time_ns >= ?")
        args.append(after_ns)
    if before_ns is not None:
        where.append("time_ns < ?")
        args.append(before_ns)
    return (sql + (" WHERE " + " AND ".join(where) if where else ""), args)

