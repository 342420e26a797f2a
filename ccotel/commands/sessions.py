"""``ccotel sessions``: the recent sessions under the roots, newest first, with their state.

Also what ``ccotel trace`` (commands/trace.py) shares with it: finding a session by id or unique
prefix (only under the roots; path-like or malformed ids are refused as ``ccotel check``
refuses them), and the spans of one session built by the real pipeline, exactly as the
exporter builds them (same names, ids, attributes), so a listing, a waterfall and a trace
backend never disagree.

Numbers come from those spans (``report.session_usage``, the reference ``ccotel report`` is
held equal to); the verdict (ghost, orphaned tool_use, stalled, process running) is
``ccotel check``'s (``check.check_session``), and turn outcomes (killed, interrupted, ...)
are the pipeline's: no rule is written a second time here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson
from rich.table import Table
from rich.text import Text

from ccotel.assemble.closing import Timeouts
from ccotel.commands.check import CheckError, Health, check_session
from ccotel.commands.options import add_stall_timeout, whole_number
from ccotel.commands.report.usage import session_usage
from ccotel.commands.terminal import columns, dollars, fit_with_path, left_cut, short_model, stdout_console
from ccotel.read.discover import SkipWarning
from ccotel.read.layout import SessionIdError, default_roots, resolve_session_id
from ccotel.read.regular import open_regular
from ccotel.read.shard import Group
from ccotel.records import FileKind, SpanRecord, StatusCode, TranscriptFile
from ccotel.run.pipeline import Options, Pipeline, discover, session_groups
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_TURN_OUTCOME,
    CLAUDE_CODE_VERSION,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    SESSION_ID,
)
from ccotel.spans.build import Conventions
from ccotel.spans.pricing import DEFAULT_PRICING, Pricing

__all__ = [
    "SessionError",
    "SessionRef",
    "SessionSpans",
    "SessionSummary",
    "TURN_SPAN",
    "add_arguments",
    "collect_spans",
    "find_session",
    "is_error",
    "Listing",
    "list_sessions",
    "select_sessions",
    "options_from_args",
    "run",
    "session_refs",
    "state_of",
    "summarize",
]

TURN_SPAN = "invoke_agent claude-code"  # spans/build.py: the root span of every turn


class SessionError(Exception):
    """The session argument was refused (path-like, malformed), names nothing, or is ambiguous."""


@dataclass(frozen=True)
class SessionRef:
    """One session found under the roots: its main transcript(s) and what must be read with them."""

    session_id: str
    project: str  # the projects dir name (the mangled cwd)
    main_paths: tuple[str, ...]
    groups: tuple[Group, ...]  # pipeline.session_groups' groups holding its files (main first)
    last_write_ns: int  # newest mtime of its files: its last activity, without reading it


@dataclass(frozen=True)
class SessionSpans:
    """The spans of one session as the exporter builds them. ``open_ids``: spans of turns (or
    background subagents) still open, which the exporter has not sent yet; they are shown as if
    they ended now (pipeline backfill with close_all)."""

    ref: SessionRef
    spans: tuple[SpanRecord, ...]
    open_ids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    short_id: str  # the shortest unique prefix (at least 8 characters): what `ccotel trace` takes
    project: str
    cwd: str | None
    path: str
    first_ns: int | None
    last_ns: int
    versions: tuple[str, ...]
    models: tuple[str, ...]
    turns: int
    open_turns: int
    outcomes: dict[str, int]
    last_outcome: str | None
    api_calls: int
    api_errors: int
    tool_calls: int
    tool_errors: int
    subagents: int
    input_tokens: int  # fresh input, as `ccotel report` and ccusage count it
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    unpriced_models: tuple[str, ...]
    state: str
    process: str
    problems: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id, "shortId": self.short_id, "project": self.project, "cwd": self.cwd,
            "path": self.path, "start": _iso(self.first_ns), "lastActivity": _iso(self.last_ns),
            "startNs": self.first_ns, "lastActivityNs": self.last_ns, "versions": list(self.versions),
            "models": list(self.models), "turns": self.turns, "openTurns": self.open_turns,
            "outcomes": dict(sorted(self.outcomes.items())), "lastOutcome": self.last_outcome,
            "apiCalls": self.api_calls, "apiErrors": self.api_errors, "toolCalls": self.tool_calls,
            "toolErrors": self.tool_errors, "subagents": self.subagents, "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens, "cacheReadTokens": self.cache_read_tokens,
            "cacheCreationTokens": self.cache_write_tokens, "totalCost": round(self.cost_usd, 6),
            "unpricedModels": list(self.unpriced_models), "state": self.state, "process": self.process,
            "problems": list(self.problems),
        }


# -- finding sessions ----------------------------------------------------------------------------


def session_refs(roots: Sequence[str], since_ns: int | None = None) -> list[SessionRef]:
    """Every session with a main transcript under the roots (those written since ``since_ns``)."""
    files = discover(Options(roots=tuple(roots), since_ns=since_ns), {}, SkipWarning())
    groups = session_groups(files)
    mains: dict[str, list[tuple[str, TranscriptFile]]] = {}
    for group in groups:
        for root, tf in group:
            if tf.kind is FileKind.MAIN and tf.session_id is not None:
                mains.setdefault(tf.session_id, []).append((root, tf))
    refs = []
    for sid, found in mains.items():
        paths = {tf.path for _, tf in found}
        # the groups holding its main file(s): with 2.0.x flat agent files, the whole project
        held = tuple(g for g in groups if any(tf.path in paths for _, tf in g))
        last = max((_mtime_ns(tf.path) for g in held for _, tf in g
                    if tf.session_id in (sid, None)), default=0)
        refs.append(SessionRef(sid, found[0][1].project, tuple(sorted(paths)), held, last))
    return refs


def find_session(arg: str, roots: Sequence[str]) -> SessionRef:
    """A session id, or a unique prefix of one (at least 8 characters), -> its files under the roots
    (layout.resolve_session_id: the rule of every command). Path-like and malformed arguments are
    refused before anything is read."""
    try:
        session_id = resolve_session_id(arg, roots)
    except SessionIdError as exc:
        raise SessionError(str(exc)) from None
    for ref in session_refs(roots):
        if ref.session_id == session_id:
            return ref
    raise SessionError(f"unknown session {arg} under {', '.join(roots)}")


# -- the spans of a session, built by the real pipeline -------------------------------------------


def options_from_args(args: argparse.Namespace) -> Options:
    """The pipeline options of the ``trace`` and ``sessions`` commands (content is never captured)."""
    prices = getattr(args, "prices", None)
    return Options(
        roots=tuple(getattr(args, "root", None) or default_roots()),
        timeouts=Timeouts(stall_ns=int(args.stall_timeout * 1e9)),
        conventions=Conventions.from_env(),
        pricing=Pricing(prices) if prices else DEFAULT_PRICING,
    )


def collect_spans(options: Options, ref: SessionRef) -> SessionSpans:
    """The session's spans as ``ccotel backfill`` builds them. A turn the exporter keeps open (its
    session may still run) is read a second time with every turn closed, and its spans are
    marked open."""
    closed, kept = _run_pipeline(options, ref, close_all=False)
    spans, open_ids = closed, frozenset[int]()
    if kept:
        everything, _ = _run_pipeline(options, ref, close_all=True)
        known = {s.span_id for s in closed}
        extra = [s for s in everything if s.span_id not in known]
        spans, open_ids = closed + extra, frozenset(s.span_id for s in extra)
    mine = tuple(s for s in spans if s.attributes.get(SESSION_ID) == ref.session_id)
    return SessionSpans(ref, mine, open_ids)


def _run_pipeline(options: Options, ref: SessionRef, close_all: bool) -> tuple[list[SpanRecord], int]:
    out: list[SpanRecord] = []
    pipeline = Pipeline(options, emit=out.extend, state=None)
    kept = pipeline.backfill(close_all=close_all, groups=[list(g) for g in ref.groups])
    return out, kept


# -- summaries -------------------------------------------------------------------------------------


def is_error(span: SpanRecord, open_ids: frozenset[int]) -> bool:
    """An error span. Not one of a turn still open: the close-all pass calls its turn and its tool
    calls without a result orphaned, but the session may still be working on them."""
    if span.status is not StatusCode.ERROR:
        return False
    if span.span_id in open_ids and (span.parent_span_id is None or span.attributes.get(ERROR_TYPE) == "orphaned"):
        return False
    return True


def state_of(health: Health, last_outcome: str | None, open_turns: int, ends_in_api_error: bool = False) -> str:
    """One word for a session, from check's verdict and the pipeline's turn outcomes, first match:
    live (its process runs), ghost (prompts, no assistant record), killed (its last turn's process
    died), orphaned (ends in a tool_use without result), stalled (owes a reply, silent past the
    stall timeout), open (a recent turn not finished, no process file to ask), the last turn's
    outcome when it was cut short (interrupted, orphaned), api_error (the last API call of the last
    turn failed), else idle. (A last turn ``incomplete`` is idle: 2.1.12-2.1.29 never write a final
    stop_reason, so most of their turns end so; one that really owes a reply is ``stalled``.)"""
    if health.process == "running":
        return "live"
    if not health.has_assistant_record:
        return "ghost"
    if last_outcome == "killed":
        return "killed"
    if health.ends_in_orphaned_tool_use:
        return "orphaned"
    if health.stalled:
        return "stalled"
    if open_turns:
        return "open"
    if last_outcome in ("interrupted", "orphaned"):
        return last_outcome
    if ends_in_api_error:
        return "api_error"
    return "idle"


def summarize(ss: SessionSpans, health: Health, short_id: str) -> SessionSummary:
    ref, spans = ss.ref, ss.spans
    turns = sorted((s for s in spans if s.parent_span_id is None and s.name == TURN_SPAN), key=lambda s: s.start_ns)
    open_turns = sum(1 for t in turns if t.span_id in ss.open_ids)
    done = [t for t in turns if t.span_id not in ss.open_ids]
    outcomes = Counter(str(t.attributes.get(CLAUDE_CODE_TURN_OUTCOME, "incomplete")) for t in done)
    last_outcome = None
    if turns:
        last_turn = turns[-1]
        last_outcome = "open" if last_turn.span_id in ss.open_ids else \
            str(last_turn.attributes.get(CLAUDE_CODE_TURN_OUTCOME, "incomplete"))
    usage = session_usage(spans).get(ref.session_id)
    chats = [s for s in spans if s.attributes.get(GEN_AI_OPERATION_NAME) == "chat"]
    tools = [s for s in spans if s.attributes.get(GEN_AI_OPERATION_NAME) == "execute_tool"]
    first = min((s.start_ns for s in spans), default=None)
    # the transcript's own time; the file's mtime only for a session without a span (a ghost)
    last = max((s.end_ns for s in spans), default=ref.last_write_ns)
    last_calls = sorted((s for s in chats if turns and s.trace_id == turns[-1].trace_id
                         and not s.attributes.get(CLAUDE_CODE_ADVISOR)), key=lambda s: s.start_ns)
    ends_in_api_error = bool(last_calls) and ERROR_TYPE in last_calls[-1].attributes
    return SessionSummary(
        session_id=ref.session_id, short_id=short_id, project=ref.project,
        cwd=next((str(t.attributes[CLAUDE_CODE_CWD]) for t in reversed(turns) if CLAUDE_CODE_CWD in t.attributes),
                 None),
        path=ref.main_paths[0], first_ns=first, last_ns=last,
        versions=tuple(dict.fromkeys(str(t.attributes[CLAUDE_CODE_VERSION]) for t in turns
                                     if CLAUDE_CODE_VERSION in t.attributes)),
        models=tuple(sorted(usage.models)) if usage else (),
        turns=len(turns), open_turns=open_turns, outcomes=dict(outcomes), last_outcome=last_outcome,
        api_calls=usage.api_calls if usage else 0,
        api_errors=sum(1 for s in chats if is_error(s, ss.open_ids)),
        tool_calls=len(tools), tool_errors=sum(1 for s in tools if is_error(s, ss.open_ids)),
        subagents=sum(1 for s in spans if s.parent_span_id is not None and s.name.startswith("invoke_agent ")),
        input_tokens=usage.input_tokens if usage else 0, output_tokens=usage.output_tokens if usage else 0,
        cache_read_tokens=usage.cache_read_tokens if usage else 0,
        cache_write_tokens=usage.cache_creation_tokens if usage else 0,
        cost_usd=usage.cost_usd if usage else 0.0,
        unpriced_models=tuple(sorted(usage.unpriced_models)) if usage else (),
        state=state_of(health, last_outcome, open_turns, ends_in_api_error), process=health.process,
        problems=tuple(health.problems),
    )


@dataclass(frozen=True)
class Listing:
    """The sessions a listing shows (newest first) and how many matched (``shown`` <= ``matched``)."""

    sessions: tuple[SessionSummary, ...]
    matched: int


def select_sessions(options: Options, since_ns: int | None = None, limit: int | None = 20,
                    now_ns: int | None = None) -> Listing:
    """The most recently written sessions under the roots, newest first, each read in full.

    ``since_ns``: only sessions with a turn started at or after it (the transcript's own times,
    not the files' mtimes, which a copy or a restore changes); files last written before it are
    not read, as they hold no such turn. Every candidate is then read to count the matches."""
    every = session_refs(options.roots)
    all_ids = sorted(r.session_id for r in every)  # short ids unique among all, not just the listed
    refs = [r for r in every if since_ns is None or r.last_write_ns >= since_ns]
    # newest first by the transcripts' own last time (a copy's or a restore's mtimes are all alike)
    refs.sort(key=lambda r: (_last_record_ns(r), r.session_id), reverse=True)
    out: list[SessionSummary] = []
    stall_s = options.timeouts.stall_ns / 1e9
    unlisted = 0  # sessions that cannot be listed: not among those "matched" (--limit 0 would not show them)
    for ref in refs:
        if since_ns is None and limit is not None and len(out) >= limit:
            break
        try:
            health = check_session(ref.session_id, options.roots, stall_s=stall_s, now_ns=now_ns)
        except CheckError:
            unlisted += 1
            continue  # gone (Claude Code's cleanup) since the scan, or not a file that can be read
        ss = collect_spans(options, ref)
        if since_ns is not None and not any(s.start_ns >= since_ns for s in ss.spans
                                            if s.parent_span_id is None and s.name == TURN_SPAN):
            continue
        out.append(summarize(ss, health, _short_id(ref.session_id, all_ids)))
    out.sort(key=lambda s: (s.last_ns, s.session_id), reverse=True)
    matched = len(out) if since_ns is not None else len(refs) - unlisted
    return Listing(tuple(out[:limit] if limit is not None else out), max(matched, len(out)))


def list_sessions(options: Options, since_ns: int | None = None, limit: int | None = 20,
                  now_ns: int | None = None) -> list[SessionSummary]:
    """``select_sessions``' sessions."""
    return list(select_sessions(options, since_ns, limit, now_ns).sessions)


def _short_id(sid: str, sorted_ids: list[str], minimum: int = 8) -> str:
    """The shortest prefix of ``sid`` (at least ``minimum`` long) that no other session shares."""
    import bisect

    i = bisect.bisect_left(sorted_ids, sid)
    neighbours = [sorted_ids[j] for j in (i - 1, i + 1) if 0 <= j < len(sorted_ids) and sorted_ids[j] != sid]
    need = minimum
    for other in neighbours:
        common = len(os.path.commonprefix([sid, other]))
        need = max(need, common + 1)
    return sid[:need]


# -- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel sessions`` options beyond cli.py's common ones (--root, --since, --prices, -v)."""
    parser.add_argument("--limit", type=whole_number(0), default=20,
                        help="at most this many sessions (default 20; 0: all)")
    parser.add_argument("--json", action="store_true", help="one JSON document, every field")
    add_stall_timeout(parser, "seconds a reply may be owed before the session counts as stalled")
    parser.add_argument("--width", type=columns, default=None, help="render for this many columns")


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    limit = args.limit if args.limit > 0 else None
    now = time.time_ns()
    since = getattr(args, "since", None)
    listing = select_sessions(options, since_ns=since, limit=limit, now_ns=now)
    if args.json:
        doc = {"sessions": [s.as_dict() for s in listing.sessions]}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = stdout_console(args.width)
    if not listing.sessions:
        where = ", ".join(options.roots)
        # a path is not broken by rich: copied from a terminal it stays whole
        console.print(f"no sessions since {_clock(since)} UTC under {where}" if since is not None
                      else f"no sessions under {where}", soft_wrap=True)
        return 0
    table, left_out = render_sessions(listing.sessions, now, console.width)
    console.print(table)
    notes = []
    if len(listing.sessions) < listing.matched:
        notes.append(f"{len(listing.sessions)} of {listing.matched} sessions (--limit 0: all)")
    if left_out:
        notes.append(f"not shown at this width: {', '.join(left_out)} (--json has every field)")
    for note in notes:
        console.print(note, style="dim")
    return 0


_STATE_STYLE = {"live": "bold green", "idle": "", "open": "yellow", "ghost": "bold red", "killed": "bold red",
                "orphaned": "bold red", "stalled": "red", "interrupted": "yellow", "incomplete": "yellow",
                "api_error": "red"}


def _session_cells(s: SessionSummary, now_ns: int) -> dict[str, str | Text]:
    errors = s.api_errors + s.tool_errors
    return {
        "session": s.short_id,
        "started (UTC)": _short_clock(s.first_ns),
        "last": _ago(now_ns - s.last_ns),
        "version": s.versions[-1] if s.versions else "",
        "model": ", ".join(short_model(m) for m in s.models),
        "turns": f"{s.turns}" + (f" ({s.open_turns} open)" if s.open_turns else ""),
        "calls": str(s.api_calls),
        "err": Text(str(errors), style="red" if errors else ""),
        "in": _compact(s.input_tokens + s.cache_read_tokens + s.cache_write_tokens),
        "out": _compact(s.output_tokens),
        "cost": f"${dollars(s.cost_usd)}" + ("*" if s.unpriced_models else ""),
        "state": Text(s.state, style=_STATE_STYLE.get(s.state, "")),
    }


# Columns given up whole, first first, when the terminal is too narrow: a cell is never cut (a number
# cut reads as a smaller one). The project takes what is left (at least _MIN_PROJECT), its path cut
# from the left: its end is the project's own name. Session, turns, cost and state always stay.
_GIVE_WAY = ("model", "version", "started (UTC)", "calls", "in", "out", "err", "last")
_COLUMNS = ("session", "started (UTC)", "last", "version", "model", "turns", "calls", "err", "in", "out", "cost",
            "state")
_RIGHT = {"turns", "calls", "err", "in", "out", "cost", "last"}
_MIN_PROJECT = 12


def render_sessions(found: Sequence[SessionSummary], now_ns: int, width: int = 120) -> tuple[Table, list[str]]:
    """A table that fits ``width`` columns, and the columns given up for it (to be named under it)."""
    rows = [_session_cells(s, now_ns) for s in found]
    names = list(_COLUMNS)
    widths = {n: max([len(n), *(len(r[n]) for r in rows)]) for n in names}
    projects = [s.cwd or s.project for s in found]
    want_project = max([len("project"), *(len(p) for p in projects)])
    shown, project_width = fit_with_path(widths, names, _GIVE_WAY, want_project, _MIN_PROJECT, width)
    shown.insert(1, "project")
    widths["project"] = project_width
    table = Table(box=None, pad_edge=False, padding=(0, 0, 0, 1), show_edge=False, header_style="bold")
    for n in shown:
        table.add_column(n, justify="right" if n in _RIGHT else "left", no_wrap=True, width=widths[n])
    for row, project in zip(rows, projects, strict=True):
        cells = dict(row, project=left_cut(project, project_width))
        table.add_row(*(cells[n] for n in shown))
    return table, [n for n in names if n not in shown]


# -- formatting helpers (also used by commands/trace.py) ------------------------------------------------


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


_TIMESTAMP = re.compile(rb'"timestamp":\s*"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z?)"')


def _last_record_ns(ref: SessionRef, tail: int = 32_768) -> int:
    """The newest ``timestamp`` in the last ``tail`` bytes of the session's main file(s): its last
    activity, without reading it whole; its files' mtime when none is found there."""
    newest = 0
    for path in ref.main_paths:
        try:
            with open_regular(path) as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - tail))
                chunk = fh.read(tail)
        except OSError:
            continue
        for m in _TIMESTAMP.finditer(chunk):
            try:
                when = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
            except ValueError:
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            newest = max(newest, int(when.timestamp() * 1e9))
    return newest or ref.last_write_ns


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    dt = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clock(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def _short_clock(ns: int | None) -> str:
    return "-" if ns is None else datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%m-%d %H:%M")


def _ago(delta_ns: int) -> str:
    s = max(delta_ns, 0) / 1e9
    if s < 60:
        return f"{s:.0f}s ago"
    if s < 3600:
        return f"{s / 60:.0f}m ago"
    if s < 86400 * 2:
        return f"{s / 3600:.0f}h ago"
    return f"{s / 86400:.0f}d ago"


def _compact(n: int) -> str:
    """Token counts in at most 5 characters: exact below 10,000, then k and M."""
    if n < 10_000:
        return f"{n:,}"
    if n < 100_000:
        return f"{n / 1000:.1f}k"
    if n < 1_000_000:
        return f"{n / 1000:.0f}k"
    return f"{n / 1e6:.2f}M"
