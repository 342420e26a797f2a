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

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the write side's imports (rules, records: slow to import) are not the report's
    from ccotel.records import SpanRecord, Usage
    from ccotel.store.ledger_rows import Rows

__all__ = ["LEDGER_FILE", "SCHEMA_VERSION", "CallRow", "Ledger", "LedgerError", "LedgerWriteError", "ToolRow",
           "TurnRow", "AgentRow", "UPSERT_CALL_SET", "SLOT_NS", "nano_usd"]

LEDGER_FILE = "ledger.db"
SCHEMA_VERSION = 2  # 2: call_totals, kept by triggers
# The quarter hour the totals are kept per: zone offsets change on quarter hours, so a report's
# local dates (and --since/--until) are decided per slot.
SLOT_NS = 900 * 1_000_000_000

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    cwd TEXT,
    project TEXT,
    model TEXT,
    agent_id TEXT,
    api_error INTEGER NOT NULL,
    input INTEGER NOT NULL,
    output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL,
    reasoning INTEGER NOT NULL,
    cost REAL,
    priced INTEGER NOT NULL,
    version TEXT
);
CREATE INDEX IF NOT EXISTS calls_time ON calls (time_ns);CREATE TABLE IF NOT EXISTS tools (
    session_id TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    name TEXT NOT NULL,
    agent_id TEXT,
    error_type TEXT,
    repaired INTEGER NOT NULL,
    PRIMARY KEY (session_id, tool_use_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agents (
    session_id TEXT NOT NULL,
    agent_key TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    agent_type TEXT NOT NULL,
    background INTEGER NOT NULL,
    interrupted INTEGER NOT NULL,
    PRIMARY KEY (session_id, agent_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    cwd TEXT,
    project TEXT,
    version TEXT,
    outcome TEXT NOT NULL,
    api_calls INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    api_errors INTEGER NOT NULL,
    orphaned_tools INTEGER NOT NULL,
    lost_tools INTEGER NOT NULL,
    stalled INTEGER NOT NULL,
    PRIMARY KEY (session_id, span_id)
) WITHOUT ROWID;
{totals}"""


def _slot_of(col: str) -> str:
    """SQL for Python's ``col // SLOT_NS`` (floor, also below zero: SQLite's / truncates)."""
    return f"(CASE WHEN {col} >= 0 THEN {col} / {SLOT_NS} ELSE -((-{col} + {SLOT_NS - 1}) / {SLOT_NS}) END)"


def _nano_of(col: str) -> str:
    """SQL for ``nano_usd(col)`` (0 when NULL): SQLite's round() is nano_usd's arithmetic."""
    return f"(CASE WHEN {col} IS NULL THEN 0 ELSE CAST(round({col} * 1e9) AS INTEGER) END)"


def _group_of(row: str) -> str:
    """The call_totals row of the call ``row`` (new or old in a trigger)."""
    return (f"session_id = {row}.session_id AND model = coalesce({row}.model, '') "
            f"AND failed = ({row}.api_error != 0) AND slot = {_slot_of(row + '.time_ns')}")


_USAGE = ("input", "output", "cache_read", "cache_write", "cache_write_5m", "cache_write_1h", "reasoning")


def _add(row: str) -> str:
    """Add the call ``row`` to its group (a new group if it has none)."""
    return (f"INSERT INTO call_totals VALUES ({row}.session_id, coalesce({row}.model, ''), {row}.api_error != 0, "
            f"{_slot_of(row + '.time_ns')}, 1, " + ", ".join(f"{row}.{u}" for u in _USAGE)
            + f", {row}.cost IS NOT NULL, {_nano_of(row + '.cost')}, "
            f"CASE WHEN {row}.time_ns != 0 THEN {row}.time_ns END, {row}.time_ns) "
            "ON CONFLICT DO UPDATE SET calls = calls + 1, "
            + "".join(f"{u} = {u} + excluded.{u}, " for u in _USAGE)
            + "priced = priced + excluded.priced, cost_nano = cost_nano + excluded.cost_nano, "
            "first_ns = CASE WHEN first_ns IS NULL OR excluded.first_ns < first_ns THEN excluded.first_ns "
            "ELSE first_ns END, last_ns = max(last_ns, excluded.last_ns);")


def _subtract(row: str) -> str:
    """Take the call ``row`` out of its group (the group goes when it has no call left); its first
    and last times are set afterwards by _recompute (a min or max cannot be subtracted)."""
    return ("UPDATE call_totals SET calls = calls - 1, " + "".join(f"{u} = {u} - {row}.{u}, " for u in _USAGE)
            + f"priced = priced - ({row}.cost IS NOT NULL), cost_nano = cost_nano - {_nano_of(row + '.cost')} "
            f"WHERE {_group_of(row)};\n"
            f"DELETE FROM call_totals WHERE {_group_of(row)} AND calls = 0;")


def _recompute(row: str) -> str:
    """The first (non-zero) and last time of the group ``row`` was in, read again from its calls
    (one session's quarter hour: index calls_session), when ``row``'s time was one of them."""
    lo = f"{_slot_of(row + '.time_ns')} * {SLOT_NS}"
    calls = (f"FROM calls WHERE session_id = {row}.session_id AND time_ns >= {lo} AND time_ns < {lo} + {SLOT_NS} "
             f"AND coalesce(model, '') = coalesce({row}.model, '') AND (api_error != 0) = ({row}.api_error != 0)")
    return (f"UPDATE call_totals SET first_ns = (SELECT min(time_ns) {calls} AND time_ns != 0), "
            f"last_ns = (SELECT max(time_ns) {calls}) "
            f"WHERE {_group_of(row)} AND (first_ns = {row}.time_ns OR last_ns = {row}.time_ns);")


# A tool call that failed; one that never got a real result (orphaned, or repaired by a resume).
_TOOL_FAILED = "(error_type IS NOT NULL)"
_TOOL_ORPHANED = "(CASE WHEN error_type = 'orphaned' OR repaired != 0 THEN 1 ELSE 0 END)"


def _tool_add(row: str) -> str:
    """Add the tool call ``row`` to its (session, quarter hour)."""
    failed, orphaned = (x.replace("error_type", f"{row}.error_type").replace("repaired", f"{row}.repaired")
                        for x in (_TOOL_FAILED, _TOOL_ORPHANED))
    return (f"INSERT INTO tool_totals VALUES ({row}.session_id, {_slot_of(row + '.time_ns')}, 1, {failed}, "
            f"{orphaned}) ON CONFLICT DO UPDATE SET tools = tools + 1, failed = failed + excluded.failed, "
            "orphaned = orphaned + excluded.orphaned;")


def _tool_subtract(row: str) -> str:
    """Take the tool call ``row`` out of its (session, quarter hour)."""
    failed, orphaned = (x.replace("error_type", f"{row}.error_type").replace("repaired", f"{row}.repaired")
                        for x in (_TOOL_FAILED, _TOOL_ORPHANED))
    group = f"session_id = {row}.session_id AND slot = {_slot_of(row + '.time_ns')}"
    return (f"UPDATE tool_totals SET tools = tools - 1, failed = failed - {failed}, orphaned = orphaned - {orphaned} "
            f"WHERE {group};\nDELETE FROM tool_totals WHERE {group} AND tools = 0;")


def _kept_by_triggers(table: str, add: Callable[[str], str], subtract: Callable[[str], str],
                      recompute: Callable[[str], str] | None = None) -> str:
    """The triggers that keep ``table``'s totals as its rows are inserted (``add`` the new row),
    updated (``subtract`` the old row, ``add`` the new one) and deleted (``subtract`` the old);
    ``recompute``: what to do after the old row went out (the group's first and last times)."""
    after = "" if recompute is None else f"\n{recompute('old')}"
    return (f"CREATE TRIGGER IF NOT EXISTS {table}_totals_insert AFTER INSERT ON {table} BEGIN\n{add('new')}\nEND;\n"
            f"CREATE TRIGGER IF NOT EXISTS {table}_totals_update AFTER UPDATE ON {table} BEGIN\n{subtract('old')}\n"
            f"{add('new')}{after}\nEND;\n"
            f"CREATE TRIGGER IF NOT EXISTS {table}_totals_delete AFTER DELETE ON {table} BEGIN\n{subtract('old')}"
            f"{after}\nEND;")


# Per (session, model, failed, quarter hour) totals of the calls, kept by SQLite as calls are
# inserted, updated (an upsert of a later snapshot: the old row out, the new one in) and deleted,
# so a report reads a few thousand groups rather than every call, and a call is never counted
# twice. model '' stands for NULL (a key column); costs are summed as integer nano-dollars
# (nano_usd), exact and in any order. first_ns is NULL when every time in the group is 0.
_TOTALS = f"""
CREATE TABLE IF NOT EXISTS call_totals (
    session_id TEXT NOT NULL,
    model TEXT NOT NULL,
    failed INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    {" INTEGER NOT NULL, ".join(_USAGE)} INTEGER NOT NULL,
    priced INTEGER NOT NULL,
    cost_nano INTEGER NOT NULL,
    first_ns INTEGER,
    last_ns INTEGER NOT NULL,
    PRIMARY KEY (session_id, model, failed, slot)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_session ON calls (session_id, time_ns);
{_kept_by_triggers("calls", _add, _subtract, _recompute)}
CREATE TABLE IF NOT EXISTS tool_totals (
    session_id TEXT NOT NULL,
    slot INTEGER NOT NULL,
    tools INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    orphaned INTEGER NOT NULL,
    PRIMARY KEY (session_id, slot)
) WITHOUT ROWID;
{_kept_by_triggers("tools", _tool_add, _tool_subtract)}
"""
# Filling the totals of a ledger written before them (schema 1), once.
_FILL_TOOL_TOTALS = (
    f"INSERT INTO tool_totals SELECT session_id, {_slot_of('time_ns')}, count(*), sum({_TOOL_FAILED}), "
    f"sum({_TOOL_ORPHANED}) FROM tools GROUP BY 1, 2")
_FILL_TOTALS = (
    f"INSERT INTO call_totals SELECT session_id, coalesce(model, ''), api_error != 0, {_slot_of('time_ns')}, "
    f"count(*), {', '.join(f'sum({u})' for u in _USAGE)}, count(cost), sum({_nano_of('cost')}), "
    "min(CASE WHEN time_ns != 0 THEN time_ns END), max(time_ns) FROM calls GROUP BY 1, 2, 3, 4")
_SCHEMA = _SCHEMA_V1.replace("{totals}", _TOTALS)
_SCHEMA_V1 = _SCHEMA_V1.replace("{totals}", "")


def _split_sql(script: str) -> list[str]:
    """The statements of a script (a trigger's body is one statement with its own ';'): executed
    one by one inside a transaction, which executescript would commit first."""
    out, part = [], ""
    for line in script.splitlines(keepends=True):
        part += line
        if sqlite3.complete_statement(part):
            out.append(part.strip())
            part = ""
    return out


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
_UPSERT_AGENT = "INSERT OR REPLACE INTO agents VALUES (?,?,?,?,?,?,?)"
_UPSERT_TURN = "INSERT OR REPLACE INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


class LedgerError(RuntimeError):
    """The ledger cannot be used (another schema version, not a database)."""


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


@dataclass(frozen=True)
class Coverage:
    """What the ledger holds: ``updated_ns`` when it was last written (0: never), ``calls`` rows,
    ``roots`` the Claude config dirs its spans were read from."""

    updated_ns: int
    calls: int
    roots: frozenset[str]


class Ledger:
    """``ledger.db``: ``record(spans)`` as the pipeline builds them, read back by ``ccotel report``."""

    def __init__(self, path: str, roots: Sequence[str] = (), clock: Any = time.time_ns) -> None:
        """Open (or create) the ledger at ``path`` (``:memory:`` for a throwaway one). ``roots``:
        the Claude config dirs the spans come from; the report uses the ledger only for them."""
        self.path = path
        self.clock = clock
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        try:
            self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            if path != ":memory:":
                os.chmod(path, 0o600)  # sessions, projects and usage: private like the state
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            version = self._meta("schema_version")
            if version is None:
                self.db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA}; INSERT OR REPLACE INTO meta VALUES "
                                      f"('schema_version', '{SCHEMA_VERSION}'); COMMIT;")
            elif version == "1":
                self._upgrade_from_1()
            elif version != str(SCHEMA_VERSION):
                raise LedgerError(f"{path}: ledger schema {version}, this ccotel reads {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{path}: {exc}") from exc
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
                for statement in _split_sql(_TOTALS):
                    self.db.execute(statement)
                self.db.execute(_FILL_TOTALS)
                self.db.execute(_FILL_TOOL_TOTALS)
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

        rows = rows_of(spans)
        if any(rows):
            self._write(rows)

    def _write(self, rows: Rows) -> None:
        calls, tools, agents, turns = rows
        with self._transaction():
            self.db.executemany(_UPSERT_CALL, calls)
            self.db.executemany(_UPSERT_TOOL, tools)
            self.db.executemany(_UPSERT_AGENT, agents)
            self.db.executemany(_UPSERT_TURN, turns)
            self._set_meta("updated_ns", str(self.clock()))

    def close(self) -> None:
        self.db.close()

    # -- reading -------------------------------------------------------------------

    def coverage(self) -> Coverage:
        roots = self._meta("roots")
        count = next(iter(self._rows("SELECT count(*) FROM calls", [])))[0]
        return Coverage(int(self._meta("updated_ns") or 0), int(count),
                        frozenset(roots.split("\n")) if roots else frozenset())

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
        sums = ", ".join(f"sum({u})" for u in _USAGE)
        rows = self.db.execute(
            "SELECT session_id, model, failed, slot, calls, " + ", ".join(_USAGE)
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
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


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

