"""``ccotel report``: token usage, estimated cost, tool calls and health by day, week, month,
session or project, like ``ccusage <view> --json``.

The calls come from the usage ledger (``ledger.db``, written as ccotel exports) and, for the
transcripts written since, from a reader of the assistant lines (``report_read.py``, loaded only
then). A report the ledger answers alone is summed in SQLite and loads neither the transcript
reader, nor the pipeline, genai-prices or rich (a table needs rich; ``--json`` does not).

``session_usage`` sums the same figures from exported chat spans: the tests hold the transcript
reader equal to it, so the report and the traces cannot disagree.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

import orjson

from ccotel.rules.model_name import reported_model
from ccotel.store.ledger import LEDGER_FILE, SLOT_NS, AgentRow, CallRow, Ledger, LedgerError, ToolRow, TurnRow, nano_usd

if TYPE_CHECKING:  # the transcript reader and rich are imported where they are used
    from rich.console import Console

    from ccotel.commands.report_read import ReadOptions
    from ccotel.records import SpanRecord
    from ccotel.run.pipeline import Options
    from ccotel.spans.pricing import Price

__all__ = ["SessionUsage", "session_usage", "Query", "Data", "Row", "Report", "VIEWS", "open_ledger", "gather",
           "summarize", "summarize_ledger", "written_since", "as_json", "render", "add_arguments", "run"]

log = logging.getLogger("ccotel.report")


def __getattr__(name: str) -> Any:
    """``build_report`` and ``report_from_spans`` live in report_read.py (with the transcript
    reader's imports); importing them from here loads it then."""
    if name in ("build_report", "report_from_spans"):
        from ccotel.commands import report_read

        return getattr(report_read, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

@dataclass
class SessionUsage:
    session_id: str
    input_tokens: int = 0  # fresh input only, as ccusage counts it
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    api_calls: int = 0
    cost_nano: int = 0  # nano-dollars (ledger.nano_usd), as the report sums them
    models: set[str] = field(default_factory=set)
    unpriced_models: set[str] = field(default_factory=set)  # calls of these models have no price: cost is low
    # model -> [input, output, cache creation, cache read, calls, cost]
    by_model: dict[str, list[float]] = field(default_factory=dict)
    first_ns: int = 0
    last_ns: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_tokens + self.cache_read_tokens

    @property
    def cost_usd(self) -> float:
        return self.cost_nano / 1e9

    def add(self, u: UsageTuple, cost: float | None, model: str | None, first_ns: int, last_ns: int) -> None:
        self.input_tokens += u[0]
        self.output_tokens += u[1]
        self.cache_read_tokens += u[2]
        self.cache_creation_tokens += u[3]
        self.cost_nano += 0 if cost is None else nano_usd(cost)
        self.api_calls += 1
        if model:
            self.models.add(model)
            if cost is None:
                self.unpriced_models.add(model)
        per = self.by_model.setdefault(model or "unknown", [0, 0, 0, 0, 0, 0.0])
        for i, v in enumerate((u[0], u[1], u[3], u[2], 1, cost or 0.0)):
            per[i] += v
        if first_ns:
            self.first_ns = min(self.first_ns, first_ns) if self.first_ns else first_ns
        self.last_ns = max(self.last_ns, last_ns)

    def as_dict(self) -> dict[str, object]:
        return {
            "sessionId": self.session_id, "inputTokens": self.input_tokens, "outputTokens": self.output_tokens,
            "cacheCreationTokens": self.cache_creation_tokens, "cacheReadTokens": self.cache_read_tokens,
            "totalTokens": self.total_tokens, "apiCalls": self.api_calls, "totalCost": round(self.cost_usd, 6),
            "modelsUsed": sorted(self.models), "unpricedModels": sorted(self.unpriced_models),
            "firstActivity": self.first_ns, "lastActivity": self.last_ns,
        }


def session_usage(spans: Iterable[SpanRecord], into: dict[str, SessionUsage] | None = None) -> dict[str, SessionUsage]:
    """Per-session usage of exported chat spans (the reference the fast report is held to)."""
    out = {} if into is None else into
    for s in spans:
        a = s.attributes
        if "gen_ai.usage.output_tokens" not in a:
            continue
        sid = str(a.get("gen_ai.conversation.id", ""))
        u = out.get(sid)
        if u is None:
            u = out[sid] = SessionUsage(sid)
        usage = (int(a.get("claude_code.usage.input_tokens", 0)), int(a["gen_ai.usage.output_tokens"]),
                 int(a.get("gen_ai.usage.cache_read.input_tokens", 0)),
                 int(a.get("gen_ai.usage.cache_write.input_tokens", 0)), 0, 0,
                 int(a.get("gen_ai.usage.reasoning.output_tokens", 0)))
        model = a.get("gen_ai.response.model")
        cost = a.get("claude_code.cost.usd")
        u.add(usage, float(cost) if cost is not None else None, model if isinstance(model, str) else None,
              s.start_ns, s.end_ns)
    return out


# A call's usage as a plain tuple, cheap to build, merge and send between processes:
# (input, output, cache read, cache creation, cache creation 5m, cache creation 1h, reasoning).
UsageTuple = tuple[int, int, int, int, int, int, int]


# == the views: daily, weekly, monthly, session, project ==========================================
#
# Calls come from the ledger (history Claude Code may have deleted since) and, for the files
# written since the ledger was last written, from the transcripts (the fast path above); a call in
# both is the ledger's (one key, counted once). Tool calls, subagents and health come from the
# ledger only: the fast path reads assistant lines alone.

VIEWS = ("daily", "weekly", "monthly", "session", "project")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Files written this long before the ledger's last write are read again from the transcripts: a
# turn still open then (its calls not yet finished) is in the file, not yet in the ledger.
REREAD_GRACE_NS = 15 * 60 * 1_000_000_000
_SLOT_NS = SLOT_NS  # zone offsets change on quarter hours: one date lookup per slot


@dataclass(frozen=True)
class Query:
    """What a report asks: a view, a time zone (None: the system's), dates (inclusive, local)."""

    view: str = "session"
    tz: tzinfo | None = None
    since: date | None = None
    until: date | None = None
    start_of_week: int = 6  # date.weekday(): sunday, as ccusage
    order: str = "asc"


@dataclass(frozen=True)
class Data:
    """Everything a report sums: calls (ledger and transcripts, once each) and the ledger's rows."""

    calls: list[CallRow]
    tools: list[ToolRow]
    agents: list[AgentRow]
    turns: list[TurnRow]
    source: str  # ledger | transcripts | ledger+transcripts


@dataclass
class ModelTotals:
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    calls: int = 0
    cost_nano: int = 0  # nano-dollars (ledger.nano_usd): summed exactly, in any order

    @property
    def cost(self) -> float:
        """USD (the sum divided once)."""
        return self.cost_nano / 1e9


@dataclass
class Row:
    """One line of a report (a day, a week, a month, a session or a project), summed as it goes."""

    key: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    reasoning: int = 0
    cost_nano: int = 0  # nano-dollars (ledger.nano_usd): summed exactly, in any order
    api_calls: int = 0
    api_errors: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    subagents: int = 0
    orphans: int = 0
    kills: int = 0
    ghosts: int = 0
    resets: int = 0
    first_ns: int = 0
    last_ns: int = 0
    models: set[str] = field(default_factory=set)
    unpriced: set[str] = field(default_factory=set)
    by_model: dict[str, ModelTotals] = field(default_factory=dict)
    session_id: str | None = None
    project: str | None = None
    cwd: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    @property
    def cost(self) -> float:
        """USD (the sum divided once)."""
        return self.cost_nano / 1e9

    def seen(self, ns: int) -> None:
        if ns:
            self.first_ns = min(self.first_ns, ns) if self.first_ns else ns
            self.last_ns = max(self.last_ns, ns)

    def add_calls(self, model: str | None, failed: bool, n: int, usage: Sequence[int], priced: int,
                  cost: int, first_ns: int, last_ns: int) -> None:
        """``n`` calls of one model (their sums; ``cost`` in nano-dollars, ``priced`` of them with a
        price), from the ledger's totals or report._call_sums."""
        self.seen(first_ns)
        self.seen(last_ns)
        if failed:
            self.api_errors += n
            return
        self.input += usage[0]
        self.output += usage[1]
        self.cache_read += usage[2]
        self.cache_write += usage[3]
        self.cache_write_5m += usage[4]
        self.cache_write_1h += usage[5]
        self.reasoning += usage[6]
        self.api_calls += n
        self.cost_nano += cost
        name = reported_model(model) or "unknown"
        self.models.add(name)
        if priced < n:
            self.unpriced.add(name)
        m = self.by_model.setdefault(name, ModelTotals())
        m.input += usage[0]
        m.output += usage[1]
        m.cache_write += usage[3]
        m.cache_read += usage[2]
        m.calls += n
        m.cost_nano += cost

    def merge(self, other: Row) -> None:
        """Add another row's figures (the totals line)."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cache_write_5m += other.cache_write_5m
        self.cache_write_1h += other.cache_write_1h
        self.reasoning += other.reasoning
        self.cost_nano += other.cost_nano
        self.api_calls += other.api_calls
        self.api_errors += other.api_errors
        self.tool_calls += other.tool_calls
        self.tool_errors += other.tool_errors
        self.subagents += other.subagents
        self.orphans += other.orphans
        self.kills += other.kills
        self.ghosts += other.ghosts
        self.resets += other.resets
        self.seen(other.first_ns)
        self.seen(other.last_ns)
        self.models |= other.models
        self.unpriced |= other.unpriced
        for model, m in other.by_model.items():
            mine = self.by_model.get(model)
            if mine is None:
                mine = self.by_model[model] = ModelTotals()
            mine.input += m.input
            mine.output += m.output
            mine.cache_write += m.cache_write
            mine.cache_read += m.cache_read
            mine.calls += m.calls
            mine.cost_nano += m.cost_nano

    def health(self) -> dict[str, int]:
        return {"orphans": self.orphans, "kills": self.kills, "ghostSessions": self.ghosts, "resets": self.resets}


@dataclass(frozen=True)
class Report:
    view: str
    rows: list[Row]
    totals: Row
    source: str

    @property
    def knows_tools(self) -> bool:
        """Tools, subagents and health come from the ledger: read from the transcripts alone (no
        ledger) a report sums the calls only, and these figures are unknown, not 0."""
        return self.source != "transcripts"


# -- gathering -----------------------------------------------------------------------------------


def open_ledger(state_dir: str | None, roots: Sequence[str], host: str | None = None) -> Ledger | None:
    """The ledger in ``state_dir``, if there is one and it was written for exactly these roots; on
    a PostgreSQL state (a fleet), the fleet's shared ledger (``host``: this host's id)."""
    if not state_dir or state_dir == "none":
        return None
    if state_dir.startswith(("postgresql://", "postgres://")):  # state.is_url (state.py: not loaded for SQLite)
        from ccotel.store.postgres_ledger import open_report_ledger  # psycopg: only for a fleet
        from ccotel.store.state import host_id

        return open_report_ledger(state_dir, host_id(host), roots)
    path = os.path.join(state_dir, LEDGER_FILE)
    if not os.path.exists(path):
        return None
    try:
        ledger = Ledger(path)
    except LedgerError as exc:
        log.warning("ledger not used: %s", exc)
        return None
    if ledger.coverage().roots != frozenset(os.path.realpath(r) for r in roots):
        log.info("ledger %s was written for other roots (%s): reading the transcripts", path,
                 ", ".join(sorted(ledger.coverage().roots)) or "none")
        ledger.close()
        return None
    return ledger


def gather(options: Options | ReadOptions, ledger: Ledger | None, workers: int | None = None,
           parallel_min_bytes: int = 64 << 20, grace_ns: int = REREAD_GRACE_NS) -> Data:
    """The calls (and, from the ledger, tools, subagents and turns) a report sums.

    With a ledger: its rows, plus the calls of transcript files written since ``grace_ns`` before
    its last write whose key it does not hold. Without: every call read from the transcripts."""
    from ccotel.commands.report_read import read_rows

    if ledger is None:
        calls = [_call_row(r) for r in read_rows(options, workers, parallel_min_bytes)]
        return Data(calls, [], [], [], "transcripts")
    cover = ledger.coverage()
    calls = list(ledger.calls())
    since = cover.updated_ns - grace_ns
    newer = read_rows(options, workers, parallel_min_bytes, keep=lambda tf: _mtime_ns(tf.path) >= since)
    if newer:
        have = {c.key for c in calls}
        fresh = [_call_row(r) for r in newer if r[0] not in have]
        calls += fresh
    source = "ledger+transcripts" if newer else "ledger"
    return Data(calls, list(ledger.tools()), list(ledger.agents()), list(ledger.turns()), source)


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _call_row(r: tuple[Any, ...]) -> CallRow:
    key, _index, sid, usage, is_api_error, model, _first_ns, last_ns, cost, project, cwd = r
    return CallRow(key, sid, last_ns, model, None, project, cwd, bool(is_api_error or usage is None),
                   usage if usage is not None else (0, 0, 0, 0, 0, 0, 0), cost)


# -- summing -------------------------------------------------------------------------------------


class _Dates:
    """Unix ns -> the local date in a zone (the system's when None), cached per quarter hour."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self.cache: dict[int, date] = {}

    def __call__(self, ns: int) -> date:
        slot = ns // _SLOT_NS
        d = self.cache.get(slot)
        if d is None:
            sec = slot * (_SLOT_NS // 1_000_000_000)
            if self.tz is None:
                d = date(*time.localtime(sec)[:3])
            else:
                d = datetime.fromtimestamp(sec, self.tz).date()
            self.cache[slot] = d
        return d


class _Rows:
    """The rows of one report as they are summed: which row an item goes to, and whether it is
    inside --since/--until (both decided by the item's quarter hour and session)."""

    def __init__(self, q: Query, where: dict[str, tuple[str | None, str | None]]) -> None:
        self.q = q
        self.where = where
        self.dates = _Dates(q.tz)
        self.rows: dict[str, Row] = {}

    def inside(self, ns: int) -> bool:
        q = self.q
        if q.since is None and q.until is None:
            return True
        d = self.dates(ns)
        return (q.since is None or d >= q.since) and (q.until is None or d <= q.until)

    def row(self, ns: int, sid: str) -> Row:
        q = self.q
        if q.view == "session":
            key = sid
        elif q.view == "project":
            key = self.where.get(sid, (None, None))[0] or "unknown"
        else:
            key = _period(self.dates(ns), q)
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = Row(key)
            if q.view == "session":
                r.session_id = sid
            if q.view in ("session", "project"):
                r.project, r.cwd = self.where.get(sid, (None, None))
        return r

    def add_turns(self, turns: Sequence[TurnRow], with_calls: set[str]) -> None:
        """Kills and resets; in the session view a session's first prompt starts it; ghosts. The
        result does not depend on the turns' order: a session's prompts count as its activity
        when it has a row once its calls, tools, subagents, kills and resets are in."""
        first_turn: dict[str, TurnRow] = {}
        for t in turns:
            if t.session_id not in with_calls and (t.session_id not in first_turn
                                                   or t.time_ns < first_turn[t.session_id].time_ns):
                first_turn[t.session_id] = t
            killed, reset = t.outcome == "killed", t.lost_tools > 0  # reset: resumed without an orphaned call
            if (killed or reset) and self.inside(t.time_ns):
                r = self.row(t.time_ns, t.session_id)
                r.seen(t.time_ns)
                r.kills += killed
                r.resets += reset
        if self.q.view == "session":  # a session starts with its first prompt
            rows = self.rows
            for t in turns:
                started = rows.get(t.session_id)
                if started is not None and self.inside(t.time_ns):
                    started.seen(t.time_ns)
        for sid, t in first_turn.items():  # a ghost: prompts and no assistant record at all
            if self.inside(t.time_ns):
                r = self.row(t.time_ns, sid)
                r.ghosts += 1
                r.resets += 1  # reason missing_transcript, as ccotel_session_resets_total counts it

    def report(self, source: str) -> Report:
        q = self.q
        ordered = sorted(self.rows.values(), key=(lambda r: (r.last_ns, r.key)) if q.view == "session" else
                         (lambda r: (r.key,)), reverse=q.order == "desc")
        totals = Row("total")
        for r in ordered:
            totals.merge(r)
        return Report(q.view, ordered, totals, source)


def summarize(data: Data, q: Query) -> Report:
    """Sum the data into the rows of ``q.view`` (items outside --since/--until left out)."""
    turns = _in_time_order(data.turns)
    rows = _Rows(q, _where([(c.session_id, c.project, c.cwd) for c in data.calls]
                           + [(t.session_id, t.project, t.cwd) for t in turns]))
    slot_ns = _SLOT_NS if _by_slot(q) else None
    with_calls = set()
    for (sid, model, failed, slot), (n, *usage, priced, cost, first_ns, last_ns) in _call_sums(data.calls,
                                                                                             slot_ns).items():
        with_calls.add(sid)
        ns = slot * (slot_ns or 0)  # any time in the slot: the date lookups are per slot
        if rows.inside(ns):
            rows.row(ns, sid).add_calls(model, failed, n, usage, priced, cost, first_ns, last_ns)
    for tool in data.tools:
        if rows.inside(tool.time_ns):
            r = rows.row(tool.time_ns, tool.session_id)
            r.tool_calls += 1
            r.tool_errors += tool.error_type is not None
            r.orphans += tool.error_type == "orphaned" or tool.repaired  # never got a real result
    for a in data.agents:
        if rows.inside(a.time_ns):
            rows.row(a.time_ns, a.session_id).subagents += 1
    rows.add_turns(turns, with_calls)
    return rows.report(data.source)


def _by_slot(q: Query) -> bool:
    """Do the rows depend on when a call was made (its quarter hour), or on its session alone?"""
    return not (q.view in ("session", "project") and q.since is None and q.until is None)


def _call_sums(calls: Iterable[CallRow], slot_ns: int | None) -> dict[tuple[str, str | None, bool, int], list[int]]:
    """The calls summed per (session, model, failed, slot), as the ledger's call_totals keeps them:
    calls, the seven usage sums, calls with a cost, their cost in nano-dollars, the earliest
    non-zero time (0: none) and the latest; in the order each group's first call comes."""
    sums: dict[tuple[str, str | None, bool, int], list[int]] = {}
    for c in calls:
        t = c.time_ns
        key = (c.session_id, c.model, c.api_error, t // slot_ns if slot_ns else 0)
        s = sums.get(key)
        if s is None:
            s = sums[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        s[0] += 1
        if not c.api_error:
            u = c.usage
            s[1] += u[0]
            s[2] += u[1]
            s[3] += u[2]
            s[4] += u[3]
            s[5] += u[4]
            s[6] += u[5]
            s[7] += u[6]
            if c.cost is not None:
                s[8] += 1
                s[9] += nano_usd(c.cost)
        if t:
            s[10] = min(s[10], t) if s[10] else t
            s[11] = max(s[11], t)
    return sums


def summarize_ledger(ledger: Ledger, q: Query) -> Report:
    """``summarize(gather(options, ledger), q)`` for a ledger no transcript was written after
    (``written_since`` is False), byte for byte, from the totals the ledger keeps per (session,
    model, quarter hour): one Python step per group of calls rather than per call (costs are
    integers of nano-dollars: their sum does not depend on the calls' order)."""
    by_slot = _by_slot(q)
    slot_ns = _SLOT_NS if by_slot else None
    totals = ledger.call_totals(by_slot)
    turns = _in_time_order(ledger.turns())
    rows = _Rows(q, _where([(sid, project, cwd) for sid, _t, _r, project, cwd in ledger.session_places()]
                           + [(t.session_id, t.project, t.cwd) for t in turns]))
    if q.view == "project":
        _project_rows(ledger, rows, totals, slot_ns)
    with_calls = set()
    for sid, model, failed, slot, n, *usage, priced, cost, first_ns, last_ns in totals:
        with_calls.add(sid)
        ns = slot * (slot_ns or 0)  # any time in the slot: the date lookups are per slot
        if rows.inside(ns):
            rows.row(ns, sid).add_calls(model, bool(failed), n, usage, priced, cost, first_ns or 0, last_ns)
    for sid, slot, n, failed, orphaned in ledger.tool_sums(slot_ns):
        ns = slot * (slot_ns or 0)
        if rows.inside(ns):
            r = rows.row(ns, sid)
            r.tool_calls += n
            r.tool_errors += failed
            r.orphans += orphaned
    for sid, slot, n in ledger.agent_sums(slot_ns):
        ns = slot * (slot_ns or 0)
        if rows.inside(ns):
            rows.row(ns, sid).subagents += n
    rows.add_turns(turns, with_calls)
    return rows.report("ledger")


def _project_rows(ledger: Ledger, rows: _Rows, totals: list[tuple[Any, ...]], slot_ns: int | None) -> None:
    """Make the project view's rows as ``summarize`` makes them: a project's row takes its place
    from the session whose call (inside --since/--until) came first, so the rows are made in the
    order of each session's first such call (its earliest inside slot, then the call's order)."""
    first_slot: dict[str, int] = {}
    for sid, _model, _failed, slot, *_rest in totals:
        if (sid not in first_slot or slot < first_slot[sid]) and rows.inside(slot * (slot_ns or 0)):
            first_slot[sid] = slot
    order = sorted((ledger.first_call(sid, slot * slot_ns) if slot_ns else ledger.first_call(sid, -(2**63)), sid, slot)
                   for sid, slot in first_slot.items())
    for _first, sid, slot in order:
        rows.row(slot * (slot_ns or 0), sid)


def written_since(roots: Sequence[str], since_ns: int) -> bool:
    """False if no transcript under ``roots`` was modified at or after ``since_ns``: then
    ``gather`` reads nothing from the transcripts and the ledger answers alone. Every ``.jsonl``
    under ``<root>/projects`` (directories entered as discover.scan enters them: not through a
    symlink) is looked at, a superset of the transcripts; one that cannot be stat'ed counts as
    written (the transcripts are read then, which is never wrong, only slower)."""
    stack = [os.path.join(root, "projects") for root in roots]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue  # scan reads nothing from a directory it cannot list either
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if not entry.is_symlink():
                    stack.append(entry.path)
            elif entry.name.endswith(".jsonl"):
                try:
                    if entry.stat().st_mtime_ns >= since_ns:
                        return True
                except OSError:
                    return True
    return False


def _where(places: Iterable[tuple[str, str | None, str | None]]) -> dict[str, tuple[str | None, str | None]]:
    """Each session's project dir and cwd (the first known), from (session, project, cwd): its
    calls in time order, then its turns."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for sid, project, cwd in places:
        have = out.get(sid)
        if have is None or (have[1] is None and cwd) or (have[0] is None and project):
            out[sid] = (project or (have[0] if have else None), cwd or (have[1] if have else None))
    return out


def _in_time_order(turns: Iterable[TurnRow]) -> list[TurnRow]:
    """Turns by time (ties by span id): whatever order they were written in, a session without a
    call is placed by its earliest turn, and the rows its turns make are made in one order."""
    return sorted(turns, key=lambda t: (t.time_ns, t.span_id))


def _period(d: date, q: Query) -> str:
    if q.view == "daily":
        return d.isoformat()
    if q.view == "monthly":
        return f"{d.year:04d}-{d.month:02d}"
    return (d - timedelta(days=(d.weekday() - q.start_of_week) % 7)).isoformat()  # weekly: its first day


# -- output --------------------------------------------------------------------------------------

_VIEW_KEYS = {"daily": ("daily", "date"), "weekly": ("weekly", "week"), "monthly": ("monthly", "month"),
              "session": ("sessions", "sessionId"), "project": ("projects", "project")}


def _iso(ns: int) -> str | None:
    if not ns:
        return None
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _figures(r: Row, known: bool) -> dict[str, Any]:
    """ccusage's fields (20.x) and ccotel's own beside them; ``known``: Report.knows_tools (else
    the tool, subagent and health figures are null, as the table shows them ``-``)."""
    return {
        "inputTokens": r.input, "outputTokens": r.output, "cacheCreationTokens": r.cache_write,
        "cacheReadTokens": r.cache_read, "totalTokens": r.total_tokens, "totalCost": round(r.cost, 6),
        "cacheCreation5mTokens": r.cache_write_5m, "cacheCreation1hTokens": r.cache_write_1h,
        "reasoningTokens": r.reasoning, "apiCalls": r.api_calls, "apiErrors": r.api_errors,
        "toolCalls": r.tool_calls if known else None, "toolErrors": r.tool_errors if known else None,
        "subagents": r.subagents if known else None, "health": r.health() if known else None,
    }


def as_json(report: Report) -> dict[str, Any]:
    """The report shaped like ``ccusage <view> --json`` (where ccusage has the view)."""
    name, key_field = _VIEW_KEYS[report.view]
    rows = []
    for r in report.rows:
        doc: dict[str, Any] = {key_field: r.key}
        if report.view == "session":
            doc.update({"projectPath": r.project, "cwd": r.cwd, "firstActivity": _iso(r.first_ns),
                        "lastActivity": _iso(r.last_ns)})
        elif report.view == "project":
            doc.update({"projectPath": r.project, "cwd": r.cwd, "firstActivity": _iso(r.first_ns),
                        "lastActivity": _iso(r.last_ns)})
        doc.update(_figures(r, report.knows_tools))
        doc["modelsUsed"] = sorted(r.models)
        doc["unpricedModels"] = sorted(r.unpriced)
        doc["modelBreakdowns"] = [
            {"modelName": m, "inputTokens": t.input, "outputTokens": t.output, "cacheCreationTokens": t.cache_write,
             "cacheReadTokens": t.cache_read, "cost": round(t.cost, 6), "apiCalls": t.calls}
            for m, t in sorted(report_models(r))]
        rows.append(doc)
    totals = _figures(report.totals, report.knows_tools)
    totals["unpricedModels"] = sorted(report.totals.unpriced)
    return {name: rows, "totals": totals, "source": report.source}


def report_models(r: Row) -> list[tuple[str, ModelTotals]]:
    return sorted(r.by_model.items(), key=lambda mt: -mt[1].cost_nano)


@dataclass(frozen=True)
class _Column:
    head: str
    footer: str
    cell: Callable[[Row], str]
    model_cell: Callable[[ModelTotals], str] | None = None  # its --breakdown line
    number: bool = True
    drop: int = 0  # 0: always shown; else dropped first when the terminal is too narrow (higher first)


def _columns(report: Report, known: bool, breakdown: bool) -> list[_Column]:
    t = report.totals

    def dash(value: str) -> str:
        return value if known else "-"

    return [
        _Column("Models", "", lambda r: "\n".join(_short(m) for m in sorted(r.models)), number=False,
                drop=0 if breakdown else 3),  # the breakdown's lines are named in it
        _Column("Input", f"{t.input:,}", lambda r: f"{r.input:,}", lambda m: f"{m.input:,}"),
        _Column("Output", f"{t.output:,}", lambda r: f"{r.output:,}", lambda m: f"{m.output:,}"),
        _Column("Cache\nwrite", f"{t.cache_write:,}", lambda r: f"{r.cache_write:,}", lambda m: f"{m.cache_write:,}"),
        _Column("Cache\nread", f"{t.cache_read:,}", lambda r: f"{r.cache_read:,}", lambda m: f"{m.cache_read:,}"),
        _Column("Total\ntokens", f"{t.total_tokens:,}", lambda r: f"{r.total_tokens:,}",
                lambda m: f"{m.input + m.output + m.cache_write + m.cache_read:,}", drop=7),
        _Column("Cost $", _cost(t), _cost, lambda m: f"{m.cost:,.2f}"),
        _Column("Calls", f"{t.api_calls:,}", lambda r: f"{r.api_calls:,}", lambda m: f"{m.calls:,}", drop=2),
        _Column("Tools", dash(f"{t.tool_calls:,}"), lambda r: dash(f"{r.tool_calls:,}"), drop=5),
        _Column("Tool\nerrors", dash(f"{t.tool_errors:,}"), lambda r: dash(f"{r.tool_errors:,}"), drop=4),
        _Column("Sub-\nagents", dash(f"{t.subagents:,}"), lambda r: dash(f"{r.subagents:,}"), drop=6),
        _Column("Health", _health(t, known), lambda r: _health(r, known), number=False, drop=1),
    ]


def _fit(columns: list[_Column], rows: list[Row], lead: int, width: int) -> list[_Column]:
    """The columns that fit ``width`` (``lead``: the label columns' width): numbers are never cut,
    so the least needed columns give way, highest ``drop`` first."""
    def need(c: _Column) -> int:
        cells = [c.footer, *c.head.split("\n"), *(c.cell(r) for r in rows[:200])]
        widest = max(len(line) for cell in cells for line in cell.split("\n"))
        return (min(widest, 16) if not c.number else widest) + 3

    kept = list(columns)
    for c in sorted((c for c in columns if c.drop), key=lambda c: -c.drop):
        if lead + sum(need(k) for k in kept) + 1 <= width:
            break
        kept.remove(c)
    return kept


def render(report: Report, console: Console, q: Query, breakdown: bool = False) -> None:
    """A rich table: one line per row, per model below it with ``breakdown``, the totals last.
    On a narrow terminal the least needed columns give way (the omitted ones are named)."""
    from rich.table import Table

    table = Table(title=f"ccotel report: {report.view} ({_zone_name(q.tz)}; from the {report.source})",
                  show_footer=True, header_style="bold", footer_style="bold")
    first = {"daily": "Date", "weekly": "Week of", "monthly": "Month", "session": "Started",
             "project": "Project"}[report.view]
    dates = _Dates(q.tz)
    labels = [_label(r, report.view, dates) for r in report.rows]
    lead_width = max([len(first), 5, *(len(x) for x in labels)]) + 3
    table.add_column(first, footer="Total", overflow="fold", no_wrap=report.view != "project",
                     min_width=min(lead_width - 3, 40))
    if report.view == "session":
        table.add_column("Project", overflow="fold", min_width=12)  # a path: folded, never cut
        table.add_column("Session", no_wrap=True)
        lead_width += 15 + 11
    columns = _columns(report, report.knows_tools, breakdown)
    shown = _fit(columns, report.rows, lead_width, console.width)
    for c in shown:
        if c.number:
            table.add_column(c.head, justify="right", footer=c.footer, no_wrap=True, min_width=len(c.footer))
        else:
            table.add_column(c.head, footer=c.footer, overflow="fold", min_width=10)
    for r, label in zip(report.rows, labels, strict=True):
        lead = [label]
        if report.view == "session":
            lead += [_place(r), (r.session_id or "")[:8]]
        table.add_row(*lead, *(c.cell(r) for c in shown))
        if breakdown:
            for model, m in report_models(r):
                cells = [(c.model_cell(m) if c.model_cell else "") for c in shown]
                if shown and shown[0].head == "Models":
                    cells[0] = f"└ {_short(model)}"
                table.add_row(*([""] * len(lead)), *cells, style="dim")
    console.print(table)
    left_out = [c.head.replace("-\n", "").replace("\n", " ") for c in columns if c not in shown]
    if left_out:
        console.print(f"(not shown at this width: {', '.join(left_out)}; --json has every column)", style="dim")
    if report.totals.unpriced:
        console.print(f"* without the calls of models that have no price: {', '.join(sorted(report.totals.unpriced))} "
                      "(give them one with --prices)")
    if not report.knows_tools:
        console.print("Tool calls, subagents and health come from the ledger, which `ccotel run` and `ccotel "
                      "backfill` write; none was used here (-).", style="dim")


def _label(r: Row, view: str, dates: _Dates) -> str:
    if view == "session":
        if not r.first_ns:
            return ""
        sec = r.first_ns / 1e9
        local = datetime.fromtimestamp(sec, dates.tz) if dates.tz else datetime.fromtimestamp(sec).astimezone()
        return local.strftime("%Y-%m-%d %H:%M")
    if view == "project":
        return _place(r)
    return r.key


def _place(r: Row) -> str:
    """Where a session ran: its cwd (a path, readable), else its projects dir."""
    path = r.cwd or r.project or "unknown"
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and path.startswith(home + "/") else path


def _short(model: str) -> str:
    return model[len("claude-"):] if model.startswith("claude-") else model


def _cost(r: Row) -> str:
    return f"{r.cost:,.2f}" + ("*" if r.unpriced else "")


def _health(r: Row, known: bool = True) -> str:
    if not known:
        return f"{r.api_errors} API errors" if r.api_errors else "-"
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in
             ((r.orphans, "orphan"), (r.kills, "kill"), (r.ghosts, "ghost"), (r.resets, "reset"),
              (r.api_errors, "API error")) if n]
    return ", ".join(parts) if parts else "ok"


def _zone_name(tz: tzinfo | None) -> str:
    return str(tz) if tz is not None else (time.tzname[0] or "local time")


# -- command line --------------------------------------------------------------------------------


def parse_day(value: str) -> date:
    """YYYYMMDD (as ccusage), YYYY-MM-DD, or a duration back from today (7d, 2w, 12h: the day it
    falls on, as the other commands' --since takes it)."""
    m = re.fullmatch(r"(\d+)([hdw])", value.strip())
    if m:
        hours = int(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        return (datetime.now().astimezone() - timedelta(hours=hours)).date()
    for fmt in ("%Y%m%d", "%Y-%m-%d"):
        try:
            return datetime.strptime(value.strip(), fmt).date()
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(f"not a date (YYYYMMDD, YYYY-MM-DD or a duration: 7d): {value!r}")


def parse_zone(value: str) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only when --timezone is given

    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown time zone: {value!r} (e.g. UTC, Europe/Berlin)") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel report`` options (besides --root and --state-dir, which cli.py adds)."""
    parser.add_argument("view", nargs="?", choices=VIEWS, default="session",
                        help="rows by day, week, month, session (default) or project")
    parser.add_argument("--json", action="store_true", help="JSON shaped like `ccusage <view> --json`")
    parser.add_argument("-b", "--breakdown", action="store_true", help="a line per model under each row")
    parser.add_argument("-s", "--since", type=parse_day, default=None, metavar="DATE",
                        help="from this day (YYYYMMDD or YYYY-MM-DD, in --timezone), inclusive")
    parser.add_argument("-u", "--until", type=parse_day, default=None, metavar="DATE",
                        help="until this day, inclusive")
    parser.add_argument("-z", "--timezone", type=parse_zone, default=None, metavar="TZ",
                        help="time zone for days, weeks and months (default: the system's)")
    parser.add_argument("-w", "--start-of-week", choices=WEEKDAYS, default="sunday",
                        help="first day of a week (default sunday, as ccusage)")
    parser.add_argument("-o", "--order", choices=("asc", "desc"), default="asc")
    parser.add_argument("--no-ledger", action="store_true",
                        help="read the transcripts only (history Claude Code deleted is then missing)")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes that read a large history in parallel (default: the cores, at most 4)")
    # Readers are forked (shard.process_context): a second one costs ~0.05 s of CPU, and halves
    # the read of 200 MB on two free cores (1.83 -> 1.19 s, 1.49 -> 0.96 s on the bench corpora).
    parser.add_argument("--parallel-min-mb", type=float, default=64.0,
                        help="a history smaller than this (MB to read) is read by one process")
    parser.add_argument("--prices", default=None, metavar="FILE",
                        help="JSON of model -> USD per million tokens, overriding genai-prices' table")
    parser.add_argument("-v", "--verbose", action="store_true")


def run(args: argparse.Namespace) -> int:
    """``ccotel report``: print the view (a table, or JSON with --json). Exit 0."""
    roots = tuple(args.root or _default_roots())
    overrides = _load_overrides(args.prices) if args.prices else None  # a bad file fails either way
    state_dir = _state_location(getattr(args, "state", None), args.state_dir)
    ledger = None if args.no_ledger else open_ledger(state_dir, roots, getattr(args, "host_id", None))
    q = Query(view=args.view, tz=args.timezone, since=args.since, until=args.until,
              start_of_week=WEEKDAYS.index(args.start_of_week), order=args.order)
    try:
        if (ledger is not None and type(ledger) is Ledger  # summed in SQL: SQLite's ledger, not a fleet's
                and not written_since(roots, ledger.coverage().updated_ns - REREAD_GRACE_NS)):
            report = summarize_ledger(ledger, q)
        else:
            from ccotel.commands.report_read import (
                ReadOptions,  # the transcript reader: not loaded for the ledger alone
            )
            from ccotel.spans.pricing import DEFAULT_PRICING, Pricing

            pricing = DEFAULT_PRICING if overrides is None else Pricing(overrides)
            data = gather(ReadOptions(roots=roots, pricing=pricing), ledger, workers=args.workers,
                          parallel_min_bytes=int(args.parallel_min_mb * 1e6))
            report = summarize(data, q)
    finally:
        if ledger is not None:
            ledger.close()
    if args.json:
        sys.stdout.write(orjson.dumps(as_json(report), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    render(report, _console(), q, breakdown=args.breakdown)
    return 0


def _state_location(state: str | None, state_dir: str | None) -> str | None:
    """``state.resolve_state(state, state_dir)``, loading state.py (the tail and parse modules,
    msgspec: ~20 ms of a report's start) only for the default dir, which it alone knows."""
    location = state or state_dir or os.environ.get("CCOTEL_STATE")
    if not location:
        from ccotel.store.state import resolve_state

        return resolve_state(None, None)
    return None if location == "none" else location


def _load_overrides(path: str) -> dict[str, Price]:
    from ccotel.spans.pricing import load_overrides

    return load_overrides(path)


def _default_roots() -> list[str]:
    from ccotel.read.discover import default_roots  # parse, records, shard: only when no --root is given

    return default_roots()


def _console() -> Console:
    """stdout; colour only on a terminal and without NO_COLOR (rich checks both); wide in a pipe."""
    from rich.console import Console

    wide = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "200") or 200)
    return Console(width=wide, highlight=False)
