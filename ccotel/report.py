"""``ccotel report``: token usage and estimated cost per session, like ``ccusage session --json``.

The report reads only what usage needs: assistant lines (a byte search finds them; tool results,
most of the bytes, are never decoded), and of those only ids, model, usage and time (msgspec
skips the content), with the assembler's rules for API calls: one call per
(message.id, requestId) across ALL files, the first file in time order keeps it, its largest
usage snapshot counts, ``<synthetic>`` lines are no call unless an API error, a failed call is
not billed, the same uuid twice in a session is one line. A big history is read by several
processes, split so that no call can be in two of them (shard.py), and merged in time order.

``session_usage`` sums the same figures from exported chat spans: the tests hold the two equal,
so the report and the traces cannot disagree.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo
from operator import itemgetter
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
import orjson
from rich.console import Console
from rich.table import Table

from . import rules
from .discover import default_roots
from .ledger import LEDGER_FILE, AgentRow, CallRow, Ledger, LedgerError, ToolRow, TurnRow
from .parse import _JUsage, parse_line, parse_timestamp
from .pipeline import Options, Pipeline, discover, session_groups, unread_bytes
from .pricing import DEFAULT_PRICING, Pricing, load_overrides
from .records import SpanRecord, TranscriptFile, Usage
from .shard import Group, balance, default_workers, plan_shards, process_context
from .state import host_id, is_url, resolve_state
from .tail import lines_with

__all__ = ["SessionUsage", "session_usage", "build_report", "report_from_spans", "Query", "Data", "Row", "Report",
           "VIEWS", "open_ledger", "gather", "summarize", "as_json", "render", "add_arguments", "run"]

log = logging.getLogger("ccotel.report")

@dataclass
class SessionUsage:
    session_id: str
    input_tokens: int = 0  # fresh input only, as ccusage counts it
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    api_calls: int = 0
    cost_usd: float = 0.0
    models: set[str] = field(default_factory=set)
    unpriced_models: set[str] = field(default_factory=set)  # calls of these models have no price: cost is low
    # model -> [input, output, cache creation, cache read, calls, cost]
    by_model: dict[str, list[float]] = field(default_factory=dict)
    first_ns: int = 0
    last_ns: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_tokens + self.cache_read_tokens

    def add(self, u: UsageTuple, cost: float | None, model: str | None, first_ns: int, last_ns: int) -> None:
        self.input_tokens += u[0]
        self.output_tokens += u[1]
        self.cache_read_tokens += u[2]
        self.cache_creation_tokens += u[3]
        self.cost_usd += cost or 0.0
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


def report_from_spans(options: Options) -> dict[str, SessionUsage]:  # noqa: D401
    """The reference: the whole pipeline, its chat spans summed."""
    totals: dict[str, SessionUsage] = {}
    Pipeline(options, emit=lambda spans: session_usage(spans, totals)).backfill(close_all=True)
    return totals


@dataclass(slots=True)
class _Call:
    """One API call as the report sees it (merged over all the lines that carry its key)."""

    session_id: str
    usage: UsageTuple | None
    is_api_error: bool
    model: str | None
    first_ns: int
    last_ns: int
    project: str | None = None  # the projects/<dir> of the file that first held it
    cwd: str | None = None

    def flat(self) -> tuple[Any, ...]:
        return (self.session_id, self.usage, self.is_api_error, self.model, self.first_ns, self.last_ns)

    def merge(self, other: _Call) -> None:
        """``other`` is the same call seen later (another file or process)."""
        self.merge_line(other.usage, other.is_api_error, other.model, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)
        self.cwd = self.cwd or other.cwd

    def merge_line(self, usage: UsageTuple | None, is_api_error: bool, model: str | None, ts: int,
                   cwd: str | None = None) -> None:
        """A later line of the same call."""
        self.cwd = self.cwd or cwd
        if usage is not None and (self.usage is None or _bigger(usage, self.usage)):
            self.usage = usage
        self.is_api_error = self.is_api_error or is_api_error
        self.model = model or self.model
        if ts:
            self.first_ns = min(self.first_ns, ts) if self.first_ns else ts
            self.last_ns = max(self.last_ns, ts)


def _bigger(a: UsageTuple, b: UsageTuple) -> bool:
    """rules.is_final_snapshot on the report's tuples (input, output, cache read, cache creation, ...)."""
    return rules.snapshot_rank(a[1], a[0] + a[1] + a[2] + a[3]) > rules.snapshot_rank(b[1], b[0] + b[1] + b[2] + b[3])


def _as_tuple(u: Usage | None) -> UsageTuple | None:
    return None if u is None else (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                                   u.cache_creation_input_tokens, u.cache_creation_5m, u.cache_creation_1h,
                                   u.reasoning_tokens)


_NEEDLE = b'"assistant"'
_CHUNK = 4 << 20
# One assistant line: message id, request id, uuid, session id, usage, is API error, model, time.
_Line = tuple[Any, ...]


class _RMessage(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _JUsage | None = None  # parse.py's: counts typed and in range, else the line steps aside


class _RLine(msgspec.Struct):
    """What usage needs of a line; the message content (most of an assistant line) is skipped."""

    type: str
    uuid: str | None = None
    sessionId: str | None = None
    requestId: str | None = None
    timestamp: str | None = None
    cwd: str | None = None
    isApiErrorMessage: bool | None = None
    madeBy: Any = None
    message: _RMessage | None = None


_decoder = msgspec.json.Decoder(_RLine)


def _quick(line: bytes) -> _Line | None:
    """An assistant line of the usual shape, decoded into a small struct. None: let
    ``parse_line`` decide (glued objects, odd types, anything unusual)."""
    try:
        o = _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    if o.type != "assistant":
        return ()
    msg = o.message
    ts = parse_timestamp(o.timestamp)
    if (msg is None or (ts is None and o.timestamp is not None)
            or (o.madeBy is not None and not isinstance(o.madeBy, str))):
        return None
    record, advisors = msg.usage.record() if msg.usage is not None else (None, ())
    usage = _as_tuple(record)
    return (msg.id, o.requestId, o.uuid, o.sessionId, usage, o.isApiErrorMessage is True, msg.model, ts or 0,
            o.madeBy, advisors, o.cwd)


def _slow(line: bytes, offset: int) -> list[_Line]:
    return [(e.message_id, e.request_id, e.uuid, e.session_id, _as_tuple(e.usage), e.is_api_error, e.model,
             e.timestamp_ns or 0, e.made_by, e.advisors, e.cwd)
            for e in parse_line(line, offset).entries if e.type == "assistant"]


def _read_group(group: Group, max_line_bytes: int) -> dict[str, _Call]:
    """The calls of one session group, by call key, in the order they first appear."""
    calls: dict[str, _Call] = {}
    seen_uuids: set[tuple[str, str]] = set()
    for _root, tf in group:
        last: tuple[str, str] | None = None  # message id and key of the file's last response line
        for offset, raw in lines_with(tf.path, _NEEDLE, max_line_bytes, _CHUNK):
            one = _quick(raw)
            for mid, rid, uuid, sid, usage, api_error, model, ts, made_by, advisors, cwd in \
                    ((one,) if one else () if one is not None else _slow(raw, offset)):
                sid = sid or tf.session_id
                if mid is None or uuid is None or sid is None or not rules.is_api_call(model, made_by, api_error):
                    continue
                if (sid, uuid) in seen_uuids:
                    continue  # the same line again (a re-emitted line): the assembler drops it too
                seen_uuids.add((sid, uuid))
                # A line that lost its requestId belongs to the response just before it with the
                # same message id (the assembler's rule for its owner's current response).
                key = last[1] if rid is None and last is not None and last[0] == mid else rules.call_key(mid, rid)
                last = (mid, key)
                _merge_line(calls, key, sid, usage, api_error, model, ts, tf.project, cwd)
                for i, adv in enumerate(advisors):  # each advisor iteration: a call of its own model
                    _merge_line(calls, f"{key}#advisor{i}", sid, _as_tuple(adv.usage), False, adv.model, ts,
                                tf.project, cwd)
    return calls


def _merge_line(calls: dict[str, _Call], key: str, sid: str, usage: UsageTuple | None, api_error: bool,
                model: str | None, ts: int, project: str | None, cwd: str | None) -> None:
    have = calls.get(key)
    if have is None:
        calls[key] = _Call(sid, usage, api_error, model, ts, ts, project, cwd)
    else:
        have.merge_line(usage, api_error, model, ts, cwd)


def _read_shard(groups: list[tuple[int, Group]], max_line_bytes: int, pricing: Pricing) -> list[tuple[Any, ...]]:
    """Calls of these groups (in time order), merged: one flat tuple per call, cheap to send back."""
    calls: dict[str, tuple[int, _Call]] = {}
    for index, group in groups:
        for key, call in _read_group(group, max_line_bytes).items():
            have = calls.get(key)
            if have is None:
                calls[key] = (index, call)
            else:
                have[1].merge(call)
    return [_row(key, index, c, pricing) for key, (index, c) in calls.items()]


def _row(key: str, index: int, c: _Call, pricing: Pricing) -> tuple[Any, ...]:
    """A call as sent back to the merging process, its cost computed here (in parallel)."""
    cost = None
    if c.usage is not None:
        cost = pricing.cost(rules.reported_model(c.model), Usage(*c.usage), c.first_ns or None)
    return (key, index, *c.flat(), round(cost, 9) if cost is not None else None, c.project, c.cwd)


def build_report(options: Options, workers: int | None = None,
                 parallel_min_bytes: int = 64 << 20) -> dict[str, SessionUsage]:
    """Per-session usage read from the transcripts (the fast path: assistant lines only)."""
    if options.since_ns is not None:
        # --since keeps or drops whole turns by when they started, as the traces do; only the
        # assembler knows turns, so this report is summed from the spans (slower, and exact).
        return report_from_spans(options)
    out: dict[str, SessionUsage] = {}
    for _key, _index, sid, usage, is_api_error, model, first_ns, last_ns, cost, *_where in \
            _read_rows(options, workers, parallel_min_bytes):
        if usage is None or is_api_error:
            continue
        s = out.get(sid)
        if s is None:
            s = out[sid] = SessionUsage(sid)
        s.add(usage, cost, rules.reported_model(model), first_ns, last_ns)
    return out


def _read_rows(options: Options, workers: int | None, parallel_min_bytes: int,
               keep: Callable[[TranscriptFile], bool] | None = None) -> list[tuple[Any, ...]]:
    """Every call of the transcripts (of the files ``keep`` accepts), merged, in time order:
    (key, group index, session, usage, is API error, model, first ns, last ns, cost, project, cwd)."""
    pricing = options.pricing
    files = discover(options, {})
    if keep is not None:
        files = [(root, tf) for root, tf in files if keep(tf)]
    groups = session_groups(files)
    weights = [sum(unread_bytes(tf.path, {}) for _root, tf in g) for g in groups]  # file sizes
    n = default_workers() if workers is None else max(1, workers)
    if n == 1 or sum(weights) < parallel_min_bytes:
        return _merged([_read_shard(list(enumerate(groups)), options.max_line_bytes, pricing)], pricing)
    bins = balance(plan_shards(groups, weights), weights, n)
    jobs = [[(i, groups[i]) for i in b] for b in bins]
    if len(jobs) == 1:
        return _merged([_read_shard(jobs[0], options.max_line_bytes, pricing)], pricing)
    with ProcessPoolExecutor(len(jobs) - 1, mp_context=process_context()) as pool:
        futures = [pool.submit(_read_shard, job, options.max_line_bytes, pricing) for job in jobs[1:]]
        results = [_read_shard(jobs[0], options.max_line_bytes, pricing)]  # this process reads a share too
        results += [f.result() for f in futures]
    return _merged(results, pricing)


def _merged(results: Sequence[list[tuple[Any, ...]]], pricing: Pricing) -> list[tuple[Any, ...]]:
    """Merge the shards (a call in two of them: the earlier group keeps it), in time order."""
    rows: dict[str, tuple[Any, ...]] = {}
    for shard_rows in results:
        for row in shard_rows:
            have = rows.setdefault(row[0], row)
            if have is not row:  # only if the shard plan missed a link: still counted once
                first, later = (row, have) if row[1] < have[1] else (have, row)
                call = _Call(*first[2:8], *first[9:11])
                call.merge(_Call(*later[2:8], *later[9:11]))
                rows[row[0]] = _row(row[0], first[1], call, pricing)
    return sorted(rows.values(), key=itemgetter(1))


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
_SLOT_NS = 900 * 1_000_000_000  # zone offsets change on quarter hours: one date lookup per slot


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
    cost: float = 0.0


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
    cost: float = 0.0
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

    def seen(self, ns: int) -> None:
        if ns:
            self.first_ns = min(self.first_ns, ns) if self.first_ns else ns
            self.last_ns = max(self.last_ns, ns)

    def add_call(self, c: CallRow) -> None:
        self.seen(c.time_ns)
        if c.api_error:
            self.api_errors += 1
            return
        u = c.usage
        self.input += u[0]
        self.output += u[1]
        self.cache_read += u[2]
        self.cache_write += u[3]
        self.cache_write_5m += u[4]
        self.cache_write_1h += u[5]
        self.reasoning += u[6]
        self.cost += c.cost or 0.0
        self.api_calls += 1
        model = rules.reported_model(c.model) or "unknown"
        self.models.add(model)
        if c.cost is None:
            self.unpriced.add(model)
        m = self.by_model.setdefault(model, ModelTotals())
        m.input += u[0]
        m.output += u[1]
        m.cache_write += u[3]
        m.cache_read += u[2]
        m.calls += 1
        m.cost += c.cost or 0.0

    def merge(self, other: Row) -> None:
        """Add another row's figures (the totals line)."""
        for name in ("input", "output", "cache_read", "cache_write", "cache_write_5m", "cache_write_1h",
                     "reasoning", "cost", "api_calls", "api_errors", "tool_calls", "tool_errors", "subagents",
                     "orphans", "kills", "ghosts", "resets"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seen(other.first_ns)
        self.seen(other.last_ns)
        self.models |= other.models
        self.unpriced |= other.unpriced
        for model, m in other.by_model.items():
            mine = self.by_model.setdefault(model, ModelTotals())
            for name in ("input", "output", "cache_write", "cache_read", "calls", "cost"):
                setattr(mine, name, getattr(mine, name) + getattr(m, name))

    def health(self) -> dict[str, int]:
        return {"orphans": self.orphans, "kills": self.kills, "ghostSessions": self.ghosts, "resets": self.resets}


@dataclass(frozen=True)
class Report:
    view: str
    rows: list[Row]
    totals: Row
    source: str


# -- gathering -----------------------------------------------------------------------------------


def open_ledger(state_dir: str | None, roots: Sequence[str], host: str | None = None) -> Ledger | None:
    """The ledger in ``state_dir``, if there is one and it was written for exactly these roots; on
    a PostgreSQL state (a fleet), the fleet's shared ledger (``host``: this host's id)."""
    if not state_dir or state_dir == "none":
        return None
    if is_url(state_dir):
        from .state_pg import open_report_ledger  # psycopg: only for a fleet

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


def gather(options: Options, ledger: Ledger | None, workers: int | None = None,
           parallel_min_bytes: int = 64 << 20, grace_ns: int = REREAD_GRACE_NS) -> Data:
    """The calls (and, from the ledger, tools, subagents and turns) a report sums.

    With a ledger: its rows, plus the calls of transcript files written since ``grace_ns`` before
    its last write whose key it does not hold. Without: every call read from the transcripts."""
    if ledger is None:
        calls = [_call_row(r) for r in _read_rows(options, workers, parallel_min_bytes)]
        return Data(calls, [], [], [], "transcripts")
    cover = ledger.coverage()
    calls = list(ledger.calls())
    since = cover.updated_ns - grace_ns
    newer = _read_rows(options, workers, parallel_min_bytes, keep=lambda tf: _mtime_ns(tf.path) >= since)
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


def summarize(data: Data, q: Query) -> Report:
    """Sum the data into the rows of ``q.view`` (items outside --since/--until left out)."""
    dates = _Dates(q.tz)

    def inside(ns: int) -> bool:
        if q.since is None and q.until is None:
            return True
        d = dates(ns)
        return (q.since is None or d >= q.since) and (q.until is None or d <= q.until)

    where = _where(data)
    if q.view in ("session", "project"):
        def bucket(ns: int, sid: str) -> str:
            return sid if q.view == "session" else (where.get(sid, (None, None))[0] or "unknown")
    else:
        def bucket(ns: int, sid: str) -> str:
            return _period(dates(ns), q)

    rows: dict[str, Row] = {}

    def row(ns: int, sid: str) -> Row:
        key = bucket(ns, sid)
        r = rows.get(key)
        if r is None:
            r = rows[key] = Row(key)
            if q.view == "session":
                r.session_id = sid
            if q.view in ("session", "project"):
                r.project, r.cwd = where.get(sid, (None, None))
        return r

    with_calls = set()
    for c in data.calls:
        with_calls.add(c.session_id)
        if inside(c.time_ns):
            row(c.time_ns, c.session_id).add_call(c)
    for tool in data.tools:
        if inside(tool.time_ns):
            r = row(tool.time_ns, tool.session_id)
            r.tool_calls += 1
            r.tool_errors += tool.error_type is not None
            r.orphans += tool.error_type == "orphaned" or tool.repaired  # never got a real result
    for a in data.agents:
        if inside(a.time_ns):
            row(a.time_ns, a.session_id).subagents += 1
    first_turn: dict[str, TurnRow] = {}
    for t in data.turns:
        if t.session_id not in with_calls and (t.session_id not in first_turn
                                               or t.time_ns < first_turn[t.session_id].time_ns):
            first_turn[t.session_id] = t
        killed, reset = t.outcome == "killed", t.lost_tools > 0  # reset: resumed without an orphaned call
        if inside(t.time_ns) and (killed or reset or (q.view == "session" and t.session_id in rows)):
            r = row(t.time_ns, t.session_id)
            r.seen(t.time_ns)  # a session starts with its first prompt
            r.kills += killed
            r.resets += reset
    for sid, t in first_turn.items():  # a ghost: prompts and no assistant record at all
        if inside(t.time_ns):
            r = row(t.time_ns, sid)
            r.ghosts += 1
            r.resets += 1  # reason missing_transcript, as ccotel_session_resets_total counts it
    ordered = sorted(rows.values(), key=(lambda r: (r.last_ns, r.key)) if q.view == "session" else
                     (lambda r: (r.key,)), reverse=q.order == "desc")
    totals = Row("total")
    for r in ordered:
        totals.merge(r)
    return Report(q.view, ordered, totals, data.source)


def _where(data: Data) -> dict[str, tuple[str | None, str | None]]:
    """Each session's project dir and cwd (the first known)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for sid, project, cwd in [(c.session_id, c.project, c.cwd) for c in data.calls] + \
            [(t.session_id, t.project, t.cwd) for t in data.turns]:
        have = out.get(sid)
        if have is None or (have[1] is None and cwd) or (have[0] is None and project):
            out[sid] = (project or (have[0] if have else None), cwd or (have[1] if have else None))
    return out


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


def _figures(r: Row) -> dict[str, Any]:
    """ccusage's fields (20.x) and ccotel's own beside them."""
    return {
        "inputTokens": r.input, "outputTokens": r.output, "cacheCreationTokens": r.cache_write,
        "cacheReadTokens": r.cache_read, "totalTokens": r.total_tokens, "totalCost": round(r.cost, 6),
        "cacheCreation5mTokens": r.cache_write_5m, "cacheCreation1hTokens": r.cache_write_1h,
        "reasoningTokens": r.reasoning, "apiCalls": r.api_calls, "apiErrors": r.api_errors,
        "toolCalls": r.tool_calls, "toolErrors": r.tool_errors, "subagents": r.subagents, "health": r.health(),
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
        doc.update(_figures(r))
        doc["modelsUsed"] = sorted(r.models)
        doc["unpricedModels"] = sorted(r.unpriced)
        doc["modelBreakdowns"] = [
            {"modelName": m, "inputTokens": t.input, "outputTokens": t.output, "cacheCreationTokens": t.cache_write,
             "cacheReadTokens": t.cache_read, "cost": round(t.cost, 6), "apiCalls": t.calls}
            for m, t in sorted(report_models(r))]
        rows.append(doc)
    totals = _figures(report.totals)
    totals["unpricedModels"] = sorted(report.totals.unpriced)
    return {name: rows, "totals": totals, "source": report.source}


def report_models(r: Row) -> list[tuple[str, ModelTotals]]:
    return sorted(r.by_model.items(), key=lambda mt: -mt[1].cost)


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
    known = report.source != "transcripts"  # tools, subagents and health are in the ledger only
    columns = _columns(report, known, breakdown)
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
    if report.source == "transcripts":
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
    parser.add_argument("--parallel-min-mb", type=float, default=256.0,
                        help="a history smaller than this (MB to read) is read by one process")
    parser.add_argument("--prices", default=None, metavar="FILE",
                        help="JSON of model -> USD per million tokens, overriding genai-prices' table")
    parser.add_argument("-v", "--verbose", action="store_true")


def run(args: argparse.Namespace) -> int:
    """``ccotel report``: print the view (a table, or JSON with --json). Exit 0."""
    roots = tuple(args.root or default_roots())
    pricing = Pricing(load_overrides(args.prices)) if args.prices else DEFAULT_PRICING
    options = Options(roots=roots, pricing=pricing)
    state_dir = resolve_state(getattr(args, "state", None), args.state_dir)
    ledger = None if args.no_ledger else open_ledger(state_dir, roots, getattr(args, "host_id", None))
    try:
        data = gather(options, ledger, workers=args.workers, parallel_min_bytes=int(args.parallel_min_mb * 1e6))
    finally:
        if ledger is not None:
            ledger.close()
    q = Query(view=args.view, tz=args.timezone, since=args.since, until=args.until,
              start_of_week=WEEKDAYS.index(args.start_of_week), order=args.order)
    report = summarize(data, q)
    if args.json:
        sys.stdout.write(orjson.dumps(as_json(report), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    render(report, _console(), q, breakdown=args.breakdown)
    return 0


def _console() -> Console:
    """stdout; colour only on a terminal and without NO_COLOR (rich checks both); wide in a pipe."""
    wide = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "200") or 200)
    return Console(width=wide, highlight=False)
