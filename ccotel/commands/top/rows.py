"""``ccotel top``'s model: one row per session running now, read from its transcripts.

Where the facts come from: the transcripts themselves, read by the real pipeline exactly as
``ccotel sessions`` and ``ccotel trace`` read them (sessions.collect_spans), and the verdict of
``ccotel check`` (check.check_session: the process file, a stall, a trailing orphaned tool_use). A
running ``ccotel run`` keeps nothing else that would change a row: its open turns are these same
turns, assembled from these same lines, and its detectors judge stalls, orphans and killed
processes by the same rules (rules/transcript.py, assemble/closing.py) over the same process
files (read/procs.py). Reading the transcripts therefore gives one answer whether or not a
``run`` is running, needs no state file to be kept in step, and cannot show a stale snapshot.
Only the sessions written within ``--active`` (or with a live process) are read, and a session is
read again only when one of its files changed (size or mtime); its health every few seconds.

A session's totals are ``sessions.summarize``'s (so a row's tokens, cost and turns equal ``ccotel
sessions --json``); the rates are those of the calls that ended within the rate window.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ccotel.commands.check import CheckError, Health, check_session
from ccotel.commands.report.usage import session_usage
from ccotel.commands.sessions import (
    SessionRef,
    SessionSpans,
    SessionSummary,
    _short_id,
    collect_spans,
    session_refs,
    summarize,
)
from ccotel.read.discover import OutsideRoot
from ccotel.read.layout import session_ids
from ccotel.read.procs import Proc, any_alive, read_session_pids
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    CLAUDE_CODE_AGENT_BACKGROUND,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_NAME,
)

__all__ = ["RED_STATES", "Sort", "TopRow", "Watcher", "active_refs", "row_of", "sort_rows"]

# States shown red: the session needs a look (sessions.state_of's words, and top's "stalled" of a
# live process whose reply is overdue).
RED_STATES = frozenset({"stalled", "orphaned", "killed", "ghost", "api_error"})
_HEALTH_EVERY_NS = 5 * 10 ** 9  # a session's health (process, stall) is asked again after this long
# A session is read again no sooner than this many times as long as its last read took: a session
# of tens of MB written every second would otherwise keep top reading it all the time.
_READ_SHARE = 5


class Sort(enum.Enum):
    """The orders ``s`` cycles through, first first."""

    COST_RATE = "$/min"
    TOKENS = "tokens"
    LAST = "last activity"
    PROJECT = "project"

    def next(self) -> Sort:
        members = list(Sort)
        return members[(members.index(self) + 1) % len(members)]


@dataclass(frozen=True)
class TopRow:
    """One session running now, as ``top`` shows it."""

    session_id: str
    short_id: str  # what `ccotel trace` takes
    project: str  # the cwd, else the projects dir name
    model: str | None  # the model of its newest call
    turns: int
    turn_open: bool  # its last turn is still under way
    tokens: int  # input + output + cache read + cache write, as `sessions --json` counts them
    cost_usd: float
    tokens_per_min: float  # of the calls that ended within the rate window
    usd_per_min: float
    tool: str | None  # the newest tool call at work, if any
    tool_started_ns: int | None
    tools_running: int  # tool calls at work, each once (_tools_at_work)
    agents_running: int
    last_ns: int  # the transcript's own last time
    state: str
    process: str  # running | gone | unknown

    @property
    def red(self) -> bool:
        return self.state in RED_STATES

    def as_dict(self, now_ns: int) -> dict[str, object]:
        return {
            "sessionId": self.session_id, "shortId": self.short_id, "project": self.project, "model": self.model,
            "turns": self.turns, "turnOpen": self.turn_open, "totalTokens": self.tokens,
            "totalCost": round(self.cost_usd, 6), "tokensPerMinute": round(self.tokens_per_min, 1),
            "costPerMinute": round(self.usd_per_min, 6), "tool": self.tool,
            "toolSeconds": None if self.tool_started_ns is None
            else round(max(now_ns - self.tool_started_ns, 0) / 1e9, 1),
            "toolsRunning": self.tools_running, "agentsRunning": self.agents_running,
            "lastActivityNs": self.last_ns, "state": self.state, "process": self.process,
        }


def _running_tools(ss: SessionSpans) -> list[SpanRecord]:
    """Tool calls of an open turn without a result yet (the close-all pass calls them orphaned;
    trace.py shows them as running by the same rule)."""
    return [s for s in ss.spans if s.span_id in ss.open_ids
            and s.attributes.get(GEN_AI_OPERATION_NAME) == "execute_tool"
            and s.attributes.get(ERROR_TYPE) == "orphaned"]


def _tools_at_work(ss: SessionSpans, running: Sequence[SpanRecord]) -> list[SpanRecord]:
    """The running tool calls each counted once: an ``Agent`` call whose subagent runs a tool of its
    own waits on that tool, which is the one counted (the subagent is in the agents column); an
    ``Agent`` call whose subagent is between tools is the tool at work on that side."""
    parent = {s.span_id: s.parent_span_id for s in ss.spans}
    ids = {s.span_id for s in running}
    waiting: set[int] = set()
    for s in running:
        up, hops = parent.get(s.span_id), 0
        while up is not None and hops < 64:  # a span tree is shallow; bounded all the same
            if up in ids:
                waiting.add(up)
            up, hops = parent.get(up), hops + 1
    return [s for s in running if s.span_id not in waiting]


def _running_agents(ss: SessionSpans, running_tool_ids: set[int]) -> int:
    """Subagents still at work: one whose spawning tool call has no result yet, or a background
    subagent the exporter still holds open."""
    n = 0
    for s in ss.spans:
        if s.parent_span_id is None or not s.name.startswith("invoke_agent ") or s.span_id not in ss.open_ids:
            continue
        if s.parent_span_id in running_tool_ids or s.attributes.get(CLAUDE_CODE_AGENT_BACKGROUND) is True:
            n += 1
    return n


def row_of(ss: SessionSpans, summary: SessionSummary, health: Health, now_ns: int, window_ns: int,
           stall_ns: int, idle_ns: int | None = None) -> TopRow:
    """``idle_ns``: how long its current turn has been silent (default: as ``health`` was judged)."""
    chats = sorted((s for s in ss.spans if s.attributes.get(GEN_AI_OPERATION_NAME) == "chat"
                    and not s.attributes.get(CLAUDE_CODE_ADVISOR)), key=lambda s: s.end_ns)
    model = next((str(s.attributes[GEN_AI_RESPONSE_MODEL]) for s in reversed(chats)
                  if GEN_AI_RESPONSE_MODEL in s.attributes), None)
    recent = session_usage(s for s in ss.spans if s.end_ns >= now_ns - window_ns).get(ss.ref.session_id)
    # over the window, or the session's own age when younger (at least a minute: a first call does
    # not read as a rate of its cost per second)
    minutes = max(min(window_ns, now_ns - (summary.first_ns or now_ns)), 60 * 10 ** 9) / 60e9
    running = _running_tools(ss)
    tools = sorted(_tools_at_work(ss, running), key=lambda s: (s.start_ns, s.span_id))
    newest = tools[-1] if tools else None
    state = summary.state
    # check calls a session whose process runs "live" however long its reply is owed: top says stalled
    idle = idle_ns if idle_ns is not None else int(health.idle_seconds * 1e9)
    if state == "live" and summary.open_turns and idle >= stall_ns:
        state = "stalled"
    return TopRow(
        session_id=summary.session_id, short_id=summary.short_id, project=summary.cwd or summary.project,
        model=model, turns=summary.turns, turn_open=summary.open_turns > 0,
        tokens=summary.input_tokens + summary.output_tokens + summary.cache_read_tokens + summary.cache_write_tokens,
        cost_usd=summary.cost_usd,
        tokens_per_min=(recent.total_tokens if recent else 0) / minutes,
        usd_per_min=(recent.cost_usd if recent else 0.0) / minutes,
        tool=str(newest.attributes.get(GEN_AI_TOOL_NAME, newest.name)) if newest else None,
        tool_started_ns=newest.start_ns if newest else None, tools_running=len(tools),
        agents_running=_running_agents(ss, {t.span_id for t in running}),
        last_ns=summary.last_ns, state=state, process=health.process,
    )


def active_refs(roots: tuple[str, ...], now_ns: int, active_ns: int,
                pids: Mapping[str, tuple[Proc, ...]]) -> list[SessionRef]:
    """Sessions running now: a transcript written within ``active_ns``, or a live Claude Code process
    (``pids``: read_session_pids of the roots)."""
    recent = {r.session_id: r for r in session_refs(roots, since_ns=now_ns - active_ns)
              if r.last_write_ns >= now_ns - active_ns}
    live = {sid for sid, procs in pids.items() if sid not in recent and any_alive(procs)}
    if live:
        recent.update({r.session_id: r for r in session_refs(roots) if r.session_id in live})
    return list(recent.values())


def sort_rows(rows: Sequence[TopRow], by: Sort) -> list[TopRow]:
    if by is Sort.COST_RATE:
        return sorted(rows, key=lambda r: (-r.usd_per_min, -r.last_ns, r.session_id))
    if by is Sort.TOKENS:
        return sorted(rows, key=lambda r: (-r.tokens, -r.last_ns, r.session_id))
    if by is Sort.LAST:
        return sorted(rows, key=lambda r: (-r.last_ns, r.session_id))
    return sorted(rows, key=lambda r: (r.project, -r.last_ns, r.session_id))


def _signature(ref: SessionRef) -> tuple[tuple[str, int, int], ...]:
    out = []
    for group in ref.groups:
        for _root, tf in group:
            try:
                st = os.stat(tf.path)
            except OSError:
                continue
            out.append((tf.path, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


@dataclass
class _Cached:
    signature: tuple[tuple[str, int, int], ...]
    spans: SessionSpans
    health: Health
    health_ns: int
    took_ns: int = 0  # how long reading it took


class Watcher:
    """The rows of the sessions running now, read again only where a file changed."""

    def __init__(self, options: Options, active_ns: int, window_ns: int) -> None:
        self.options = options
        self.active_ns = active_ns
        self.window_ns = window_ns
        self._cache: dict[str, _Cached] = {}
        self._outside = OutsideRoot()  # a frame every few seconds: a file linked out of the root said once

    def rows(self, now_ns: int | None = None) -> list[TopRow]:
        now = now_ns if now_ns is not None else time.time_ns()
        pids = read_session_pids(self.options.roots, self._outside)  # once a frame: its sessions and their states
        refs = active_refs(self.options.roots, now, self.active_ns, pids)
        ids = sorted(r.session_id for r in refs)
        # short ids unique among every session under the roots, as `ccotel trace` resolves them
        every = sorted(set(session_ids(self.options.roots)) | set(ids))
        stall_ns = self.options.timeouts.stall_ns
        processes = _process_states(pids)
        out = []
        for ref in refs:
            entry = self._read(ref, now, processes.get(ref.session_id, "unknown"))
            if entry is None:
                continue
            summary = summarize(entry.spans, entry.health, _short_id(ref.session_id, every))
            # the files unchanged since its health was judged: silent that much longer; and not silent
            # while a subagent writes (check reads the main transcript alone)
            idle = min(int(entry.health.idle_seconds * 1e9) + max(now - entry.health_ns, 0),
                       max(now - ref.last_write_ns, 0))
            out.append(row_of(entry.spans, summary, entry.health, now, self.window_ns, stall_ns, idle))
        self._cache = {k: v for k, v in self._cache.items() if k in set(ids)}
        return out

    def spans_of(self, session_id: str) -> SessionSpans | None:
        """The spans last read of a session shown (for its trace), None once it is no longer."""
        entry = self._cache.get(session_id)
        return entry.spans if entry is not None else None

    def _read(self, ref: SessionRef, now_ns: int, process: str) -> _Cached | None:
        """The session's spans and health, read again only when a file changed, its process came
        or went (``process``: running, gone or unknown, as check says it), or a turn is open (time
        alone closes one: a final answer after a quiet second, an orphan past the stall timeout),
        then every few seconds. A finished session's health does not change with time."""
        sig = _signature(ref)
        entry = self._cache.get(ref.session_id)
        if entry is not None and entry.signature == sig and entry.health.process == process and (
                not entry.spans.open_ids or now_ns - entry.health_ns < _HEALTH_EVERY_NS):
            return entry
        if entry is not None and entry.health.process == process and \
                now_ns - entry.health_ns < _READ_SHARE * entry.took_ns:
            return entry  # a big transcript written all the time: read at most a share of the time
        started = time.monotonic_ns()
        try:
            health = check_session(ref.session_id, self.options.roots, stall_s=self.options.timeouts.stall_ns / 1e9,
                                   now_ns=now_ns, probes=(0.0,))
        except CheckError:
            return None  # gone since the scan (Claude Code's cleanup)
        # while its process runs, a turn owing a tool result or a reply stays open however long
        # (closing.flush_session, as `ccotel run` keeps it live): the row says stalled (row_of)
        spans = collect_spans(self.options, ref)
        self._cache[ref.session_id] = entry = _Cached(sig, spans, health, now_ns, time.monotonic_ns() - started)
        return entry


def _process_states(pids: Mapping[str, tuple[Proc, ...]]) -> dict[str, str]:
    """session id -> running or gone, for the sessions with a process file (check's words)."""
    return {sid: "running" if any_alive(procs) else "gone" for sid, procs in pids.items()}
