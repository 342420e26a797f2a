"""The usage ledger's SQLite schema (ledger.py): the tables, and the per quarter hour totals that
triggers keep as calls and tool calls are written, so a report sums a few thousand groups rather
than every row."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

__all__ = ["SLOT_NS", "USAGE", "SCHEMA", "TOTALS", "TOTALS_TRIGGERS", "FILL_TOTALS", "FILL_TOOL_TOTALS", "split_sql"]

# The quarter hour the totals are kept per: zone offsets change on quarter hours, so a report's
# local dates (and --since/--until) are decided per slot.
SLOT_NS = 900 * 1_000_000_000

SCHEMA_V1 = """
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


USAGE = ("input", "output", "cache_read", "cache_write", "cache_write_5m", "cache_write_1h", "reasoning")


def _add(row: str) -> str:
    """Add the call ``row`` to its group (a new group if it has none)."""
    return (f"INSERT INTO call_totals VALUES ({row}.session_id, coalesce({row}.model, ''), {row}.api_error != 0, "
            f"{_slot_of(row + '.time_ns')}, 1, " + ", ".join(f"{row}.{u}" for u in USAGE)
            + f", {row}.cost IS NOT NULL, {_nano_of(row + '.cost')}, "
            f"CASE WHEN {row}.time_ns != 0 THEN {row}.time_ns END, {row}.time_ns) "
            "ON CONFLICT DO UPDATE SET calls = calls + 1, "
            + "".join(f"{u} = {u} + excluded.{u}, " for u in USAGE)
            + "priced = priced + excluded.priced, cost_nano = cost_nano + excluded.cost_nano, "
            "first_ns = CASE WHEN first_ns IS NULL OR excluded.first_ns < first_ns THEN excluded.first_ns "
            "ELSE first_ns END, last_ns = max(last_ns, excluded.last_ns);")


def _subtract(row: str) -> str:
    """Take the call ``row`` out of its group (the group goes when it has no call left); its first
    and last times are set afterwards by _recompute (a min or max cannot be subtracted)."""
    return ("UPDATE call_totals SET calls = calls - 1, " + "".join(f"{u} = {u} - {row}.{u}, " for u in USAGE)
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
TOTALS = f"""
CREATE TABLE IF NOT EXISTS call_totals (
    session_id TEXT NOT NULL,
    model TEXT NOT NULL,
    failed INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    {" INTEGER NOT NULL, ".join(USAGE)} INTEGER NOT NULL,
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
# The triggers that keep them (dropped while a fill writes the ledger, made again at its end).
TOTALS_TRIGGERS = tuple(f"{table}_totals_{op}" for table in ("calls", "tools") for op in ("insert", "update", "delete"))
# Filling the totals from the calls and tools: a ledger written before them (schema 1), once; the end of a fill.
FILL_TOOL_TOTALS = (
    f"INSERT INTO tool_totals SELECT session_id, {_slot_of('time_ns')}, count(*), sum({_TOOL_FAILED}), "
    f"sum({_TOOL_ORPHANED}) FROM tools GROUP BY 1, 2")
FILL_TOTALS = (
    f"INSERT INTO call_totals SELECT session_id, coalesce(model, ''), api_error != 0, {_slot_of('time_ns')}, "
    f"count(*), {', '.join(f'sum({u})' for u in USAGE)}, count(cost), sum({_nano_of('cost')}), "
    "min(CASE WHEN time_ns != 0 THEN time_ns END), max(time_ns) FROM calls GROUP BY 1, 2, 3, 4")
SCHEMA = SCHEMA_V1.replace("{totals}", TOTALS)
SCHEMA_V1 = SCHEMA_V1.replace("{totals}", "")


def split_sql(script: str) -> list[str]:
    """The statements of a script (a trigger's body is one statement with its own ';'): executed
    one by one inside a transaction, which executescript would commit first."""
    out, part = [], ""
    for line in script.splitlines(keepends=True):
        part += line
        if sqlite3.complete_statement(part):
            out.append(part.strip())
            part = ""
    return out
