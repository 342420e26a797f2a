"""``ccotel trace SESSION [--turn N]``: one turn's spans as a waterfall in the terminal.

The view a user needs when no trace backend runs. The spans are the exporter's own: the real
pipeline over the session's files (sessions.collect_spans), so names, ids, attributes and
nesting are what Jaeger or Phoenix would show. Nothing here decides what a span is; this
module only lays the spans of one trace out as a tree on a time axis (bars proportional to
durations), with tokens and cost on chat spans and errors in red.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ccotel.commands.options import add_stall_timeout
from ccotel.commands.sessions import (
    TURN_SPAN,
    SessionError,
    SessionSpans,
    _clock,
    _compact,
    _iso,
    collect_spans,
    find_session,
    is_error,
    options_from_args,
)
from ccotel.commands.terminal import columns, dollars, short_model, stdout_console
from ccotel.records import SpanRecord
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    CLAUDE_CODE_AGENT_BACKGROUND,
    CLAUDE_CODE_AGENT_ID,
    CLAUDE_CODE_COST_UNPRICED,
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_TOOL_BACKGROUND,
    CLAUDE_CODE_TURN_API_CALLS,
    CLAUDE_CODE_TURN_API_ERRORS,
    CLAUDE_CODE_TURN_OUTCOME,
    CLAUDE_CODE_TURN_TOOL_CALLS,
    CLAUDE_CODE_VERSION,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_NAME,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)

__all__ = [
    "Row",
    "TurnTrace",
    "add_arguments",
    "bar_cells",
    "render_turn",
    "render_turns",
    "rows_of",
    "run",
    "select_turn",
    "shown_end",
    "turn_json",
    "turns_json",
    "turns_of",
]


@dataclass(frozen=True)
class TurnTrace:
    """The spans of one trace (one turn), ``index`` counted from 1 in start order."""

    index: int
    trace_id: int
    spans: tuple[SpanRecord, ...]
    open_ids: frozenset[int]

    @property
    def root(self) -> SpanRecord:
        """The turn span (``invoke_agent claude-code``), or the earliest span without a parent here."""
        tops = _tops(self.spans)
        return next((s for s in tops if s.name == TURN_SPAN), tops[0])

    @property
    def is_open(self) -> bool:
        return self.root.span_id in self.open_ids

    @property
    def start_ns(self) -> int:
        return min(s.start_ns for s in self.spans)

    @property
    def end_ns(self) -> int:
        # background subagents outlive the turn span: the axis covers every span of the trace
        return max(s.end_ns for s in self.spans)

    def end_as_of(self, now_ns: int) -> int:
        """The axis's end: ``now_ns`` while a span of the trace is still at work (a running tool
        writes nothing until its result, so the last line's time says nothing of how long it runs)."""
        return max(shown_end(s, self.open_ids, now_ns) for s in self.spans)


@dataclass(frozen=True)
class Row:
    """One line of the waterfall: a span, its depth, and the tree guide drawn before its name."""

    span: SpanRecord
    depth: int
    guide: str
    parent_span_id: int | None  # the row above it in the tree (== span.parent_span_id when that is in the trace)


def turns_of(ss: SessionSpans) -> list[TurnTrace]:
    by_trace: dict[int, list[SpanRecord]] = {}
    for s in ss.spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    traces = sorted(by_trace.items(), key=lambda kv: (min(s.start_ns for s in kv[1]), kv[0]))
    return [TurnTrace(i + 1, tid, tuple(spans), ss.open_ids) for i, (tid, spans) in enumerate(traces)]


def select_turn(turns: Sequence[TurnTrace], n: int | None) -> TurnTrace:
    """The Nth turn (1-based; negative from the end; None: the last)."""
    if not turns:
        raise SessionError("the session has no turn (no prompt on its main chain)")
    if n is None:
        return turns[-1]
    if n == 0 or abs(n) > len(turns):
        raise SessionError(f"--turn {n}: the session has {len(turns)} turn{'s' if len(turns) != 1 else ''} "
                           f"(1..{len(turns)}, or -1..-{len(turns)} from the end)")
    return turns[n - 1] if n > 0 else turns[n]


def _order(s: SpanRecord) -> tuple[int, int, str, int]:
    # advisor calls start with their chat span: keep them right under it, before its tool calls
    return (s.start_ns, 0 if s.attributes.get(CLAUDE_CODE_ADVISOR) else 1, s.name, s.span_id)


def _tops(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    ids = {s.span_id for s in spans}
    return sorted((s for s in spans if s.parent_span_id is None or s.parent_span_id not in ids), key=_order)


def rows_of(turn: TurnTrace) -> list[Row]:
    """The trace as a depth-first tree, children in start order."""
    children: dict[int, list[SpanRecord]] = {}
    for s in turn.spans:
        if s.parent_span_id is not None:
            children.setdefault(s.parent_span_id, []).append(s)
    rows: list[Row] = []

    def walk(span: SpanRecord, depth: int, prefix: str, last: bool, parent: int | None) -> None:
        guide = "" if depth == 0 else prefix + ("└─ " if last else "├─ ")
        rows.append(Row(span, depth, guide, parent))
        kids = sorted(children.get(span.span_id, []), key=_order)
        below = "" if depth == 0 else prefix + ("   " if last else "│  ")
        for i, kid in enumerate(kids):
            walk(kid, depth + 1, below, i == len(kids) - 1, span.span_id)

    for top in _tops(turn.spans):
        walk(top, 0, "", True, None)
    return rows


# -- what a span says ------------------------------------------------------------------------------


def _kind(s: SpanRecord) -> str:
    op = s.attributes.get(GEN_AI_OPERATION_NAME)
    if op == "chat":
        return "advisor" if s.attributes.get(CLAUDE_CODE_ADVISOR) else "chat"
    if op == "execute_tool":
        return "tool"
    return "turn" if s.name == TURN_SPAN and s.parent_span_id is None else "agent"


def _still_running(s: SpanRecord, open_ids: frozenset[int]) -> bool:
    """A tool call of an open turn without a result yet: the close-all pass calls it orphaned,
    but its session may still be working on it."""
    return s.span_id in open_ids and s.attributes.get(ERROR_TYPE) == "orphaned"


def _at_work(s: SpanRecord, open_ids: frozenset[int]) -> bool:
    """Still at work as of now: an open turn, a subagent run still held open, a tool call without
    a result yet. (A call of an open turn is done: it is only not exported yet.)"""
    kind = _kind(s)
    return s.span_id in open_ids and (kind in ("turn", "agent") or _still_running(s, open_ids))


def shown_end(s: SpanRecord, open_ids: frozenset[int], now_ns: int) -> int:
    """Where a span ends on the waterfall: a span still at work runs until now; the span itself
    (what is exported, and --json) keeps its last line's time."""
    return max(s.end_ns, now_ns) if _at_work(s, open_ids) else s.end_ns


def _duration(ns: int) -> str:
    s = max(ns, 0) / 1e9
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.2f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _token_items(a: dict[str, Any]) -> list[str]:
    return [f"in {_compact(int(a.get(GEN_AI_USAGE_INPUT_TOKENS, 0)))}",
            f"out {_compact(int(a.get(GEN_AI_USAGE_OUTPUT_TOKENS, 0)))}",
            f"cr {_compact(int(a.get(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0)))}",
            f"cw {_compact(int(a.get(GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, 0)))}"]


def _tokens(a: dict[str, Any]) -> str:
    return " ".join(_token_items(a))


def _cost_cell(s: SpanRecord) -> str:
    a = s.attributes
    if GEN_AI_USAGE_OUTPUT_TOKENS not in a:
        return ""
    cost = a.get(CLAUDE_CODE_COST_USD)
    if cost is not None:
        return dollars(float(cost))
    return "unpriced" if a.get(CLAUDE_CODE_COST_UNPRICED) else ""


@dataclass(frozen=True)
class _Part:
    text: str
    style: str = ""
    whole: bool = False  # a figure: shown whole or left out, never cut


def _info(s: SpanRecord, open_ids: frozenset[int]) -> list[_Part]:
    """What the info column says of a span, in the order it gives way from the end (figures whole)."""
    a, kind = s.attributes, _kind(s)
    parts: list[_Part] = []
    if kind == "turn":
        outcome = "open (still running)" if s.span_id in open_ids else str(a.get(CLAUDE_CODE_TURN_OUTCOME, ""))
        parts.append(_Part(outcome, "bold red" if is_error(s, open_ids) else "bold"))
        if a.get(CLAUDE_CODE_TURN_API_ERRORS):
            parts.append(_Part(f" · {_n(int(a[CLAUDE_CODE_TURN_API_ERRORS]), 'API error')}", "red", True))
        parts.append(_Part(f" · {_n(int(a.get(CLAUDE_CODE_TURN_API_CALLS, 0)), 'call')}", "", True))
        parts.append(_Part(f" · {_n(int(a.get(CLAUDE_CODE_TURN_TOOL_CALLS, 0)), 'tool')}", "", True))
    elif kind in ("chat", "advisor"):
        if GEN_AI_USAGE_OUTPUT_TOKENS in a:
            if kind == "advisor":
                parts.append(_Part("advisor "))
            parts.extend(_Part((" " if i else "") + item, "", True) for i, item in enumerate(_token_items(a)))
    elif kind == "agent":
        agent = str(a.get(CLAUDE_CODE_AGENT_ID, ""))[:8]
        parts.append(_Part(f"agent {agent}"))
        if a.get(CLAUDE_CODE_AGENT_BACKGROUND):
            parts.append(_Part(" · background", "cyan"))
        parts.append(_Part(f" · {_n(int(a.get(CLAUDE_CODE_TURN_API_CALLS, 0)), 'call')}", "", True))
    elif kind == "tool":
        if a.get(CLAUDE_CODE_TOOL_BACKGROUND):
            parts.append(_Part("background", "cyan"))
        if _still_running(s, open_ids):
            parts.append(_Part("running: no result yet", "yellow"))
    if s.span_id in open_ids and kind != "turn" and not _still_running(s, open_ids):
        parts.append(_Part(" (open)", "yellow"))
    if is_error(s, open_ids) and kind != "turn":
        err = str(a.get(ERROR_TYPE, "error"))
        msg = s.status_message or ""
        detail = f"✗ {err}" + (f": {msg}" if msg and msg != err else "")
        parts.insert(0, _Part(detail + (" " if parts else ""), "bold red"))  # listed in full under the table
    return parts


def _fit_info(parts: Sequence[_Part], width: int) -> Text:
    """The parts in ``width`` cells: figures from the last back give way whole; a word may be cut
    (by the column's ellipsis: errors are listed in full under the table)."""
    kept = list(parts)
    while sum(len(p.text) for p in kept) > width and any(p.whole for p in kept):
        kept.remove(next(p for p in reversed(kept) if p.whole))
    text = Text()
    for p in kept:
        text.append(p.text.lstrip() if not text else p.text, style=p.style)
    return text


_STYLE = {"turn": "bold", "chat": "blue", "advisor": "cyan", "tool": "green", "agent": "magenta"}


def bar_cells(start_ns: int, end_ns: int, t0: int, total_ns: int, width: int) -> tuple[int, int]:
    """(first cell, cells) of a span's bar on an axis of ``width`` cells from t0 over total_ns:
    the start is floored, the end rounded, at least one cell; a later span never starts left of
    an earlier one."""
    total = max(total_ns, 1)
    first = min(int((start_ns - t0) * width // total), width - 1)
    end = math.floor((end_ns - t0) * width / total + 0.5)
    last = min(width, max(first + 1, end))
    return first, last - first


def _bar(s: SpanRecord, end_ns: int, t0: int, total: int, width: int, style: str) -> Text:
    first, cells = bar_cells(s.start_ns, end_ns, t0, total, width)
    short = (end_ns - s.start_ns) * width < total / 2  # under half a cell: a tick, not a block
    text = Text(" " * first)
    text.append("▏" if short else "█" * cells, style=style)
    text.append(" " * (width - first - (1 if short else cells)))
    return text


def _axis(total_ns: int, width: int) -> Text:
    """Tick labels at 0, the end and, when it fits with a blank either side, the middle."""
    end = _duration(total_ns)
    cells = [" "] * width
    cells[0] = "0"
    at_end = max(1, width - len(end))
    for i, ch in enumerate(end[:width - at_end]):
        cells[at_end + i] = ch
    mid = _duration(total_ns // 2)
    at_mid = width // 2 - len(mid) // 2
    if at_mid >= 2 and at_mid + len(mid) < at_end - 1:
        cells[at_mid:at_mid + len(mid)] = list(mid)
    return Text("".join(cells), style="dim")


@dataclass(frozen=True)
class _Layout:
    name: int
    duration: int
    bar: int
    info: int
    cost: int
    short_names: bool  # `Bash` for `execute_tool Bash`, `chat opus-4-8` for `chat claude-opus-4-8`


_DURATION = 6


def _layout(width: int, names: Sequence[int], short: Sequence[int], infos: Sequence[int], cost: int,
            guide: int = 0) -> _Layout:
    """Column widths from what the rows hold. The duration and the cost are whole always. The info
    column is as wide as its longest cell up to 42% of the width, the bar at least a sixth of it;
    the names are shortened (the tool's name without ``execute_tool``) before they are cut, and
    the info column's figures give way whole when even so it is too narrow (a deep tree keeps 8
    characters of name after its guide); surplus to the bar."""
    gaps = 4 if cost else 3
    room = width - _DURATION - cost - gaps
    info = min(max(infos, default=10), int(width * 0.42))
    min_bar = max(12, width // 6)
    short_names = max(names, default=0) + info + min_bar > room
    want = max(short if short_names else names, default=10)
    name = max(12, min(want, guide + 8), min(want, room - info - min_bar))
    info = max(0, min(info, room - name - min_bar))
    bar = room - name - info
    return _Layout(name, _DURATION, bar, info, cost, short_names)


def _short_name(s: SpanRecord) -> str:
    """A span's name for a narrow column: the tool's own name, the model without ``claude-``."""
    a = s.attributes
    if a.get(GEN_AI_OPERATION_NAME) == "execute_tool" and a.get(GEN_AI_TOOL_NAME):
        return str(a[GEN_AI_TOOL_NAME])
    op, _, rest = s.name.partition(" ")
    return f"{op} {short_model(rest)}" if op == "chat" and rest else s.name


def render_turn(turn: TurnTrace, ss: SessionSpans, count: int, width: int,
                now_ns: int | None = None) -> RenderableType:
    """``now_ns`` (default: the clock): how far the spans still at work have run."""
    now = time.time_ns() if now_ns is None else now_ns
    rows = rows_of(turn)
    infos = [_info(r.span, ss.open_ids) for r in rows]
    costs = [_cost_cell(r.span) for r in rows]
    cost_width = max((len(c) for c in costs if c), default=0)
    cost_width = max(cost_width, 1) if cost_width else 0
    lay = _layout(width, [len(r.guide) + len(r.span.name) for r in rows],
                  [len(r.guide) + len(_short_name(r.span)) for r in rows],
                  [sum(len(p.text) for p in i) for i in infos], cost_width, max(len(r.guide) for r in rows))
    t0, total = turn.start_ns, max(turn.end_as_of(now) - turn.start_ns, 1)
    table = Table(box=None, pad_edge=False, padding=(0, 0, 0, 1), show_edge=False, header_style="bold")
    table.add_column("span", width=lay.name, no_wrap=True, overflow="ellipsis")
    table.add_column("took", width=lay.duration, justify="right", no_wrap=True)
    table.add_column(_axis(total, lay.bar), width=lay.bar, no_wrap=True)
    table.add_column("tokens · status"[:lay.info] if lay.info else "", width=lay.info, no_wrap=True,
                     overflow="ellipsis")
    if lay.cost:
        table.add_column("$", width=lay.cost, justify="right", no_wrap=True)
    for r, info, cost in zip(rows, infos, costs, strict=True):
        s = r.span
        error = is_error(s, ss.open_ids)
        style = "bold red" if error else ("yellow" if s.span_id in ss.open_ids else _STYLE[_kind(s)])
        name = Text()
        name.append(r.guide, style="dim")  # only the guide: a Text's own style would dim the name too
        name.append(_short_name(s) if lay.short_names else s.name, style=style)
        end = shown_end(s, ss.open_ids, now)
        cells: list[str | Text] = [name, _duration(end - s.start_ns), _bar(s, end, t0, total, lay.bar, style),
                                   _fit_info(info, lay.info)]
        table.add_row(*cells, *([cost] if lay.cost else []))
    return Group(*_header(turn, ss, count, width, now), table, *_errors(rows, ss.open_ids), _legend())


def _header(turn: TurnTrace, ss: SessionSpans, count: int, width: int, now_ns: int) -> list[Text]:
    root, spans = turn.root, turn.spans
    a = root.attributes
    chats = [s for s in spans if GEN_AI_USAGE_OUTPUT_TOKENS in s.attributes]
    cost = sum(float(s.attributes.get(CLAUDE_CODE_COST_USD, 0.0)) for s in chats)
    unpriced = any(s.attributes.get(CLAUDE_CODE_COST_UNPRICED) for s in chats)
    models = sorted({str(s.attributes[GEN_AI_RESPONSE_MODEL]) for s in chats
                     if GEN_AI_RESPONSE_MODEL in s.attributes})
    api_errors = [s for s in spans if _kind(s) == "chat" and is_error(s, ss.open_ids)]
    tool_errors = [s for s in spans if _kind(s) == "tool" and is_error(s, ss.open_ids)]
    agents = [s for s in spans if _kind(s) == "agent"]
    outcome = "open (still running; shown as of now, not exported yet)" if turn.is_open else \
        str(a.get(CLAUDE_CODE_TURN_OUTCOME, "incomplete"))
    head, trace = f"session {ss.ref.session_id}  turn {turn.index}/{count}", f"trace {turn.trace_id:032x}"
    title = Text(f"{head}  {trace}" if len(head) + 2 + len(trace) <= width else f"{head}\n{trace}", style="bold")
    said = Text("outcome ")
    said.append(outcome, style="bold red" if is_error(root, ss.open_ids) else
                ("yellow" if turn.is_open else "bold green"))
    took = _duration(turn.end_as_of(now_ns) - turn.start_ns)
    when = [Text(f"started {_clock(turn.start_ns)} UTC"),
            Text(f"running {took} so far", style="yellow") if turn.is_open else Text(f"took {took}"), said]
    if a.get(CLAUDE_CODE_VERSION):
        when.append(Text(f"Claude Code {a[CLAUDE_CODE_VERSION]}"))
    lines = [title, *_flow(when, width)]
    if a.get(CLAUDE_CODE_CWD):
        lines.append(Text(f"cwd {a[CLAUDE_CODE_CWD]}"))
    sums = {k: sum(int(s.attributes.get(k, 0)) for s in chats) for k in (
        GEN_AI_USAGE_INPUT_TOKENS, GEN_AI_USAGE_OUTPUT_TOKENS, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS)}
    calls = [s for s in spans if _kind(s) == "chat"]
    advisors = sum(1 for s in spans if _kind(s) == "advisor")
    tools = sum(1 for s in spans if _kind(s) == "tool")
    advised = f" + {_n(advisors, 'advisor call')}" if advisors else ""
    lines += _flow([Text(f"{_n(len(calls), 'API call')} ({', '.join(models) or 'no model'}){advised}"),
                    Text(_n(tools, 'tool call')), Text(_n(len(agents), 'subagent'))], width)
    lines += _flow([Text(f"tokens {_tokens(sums)}"),
                    Text(f"cost ${dollars(cost)}{' + unpriced calls' if unpriced else ''}")], width)
    if api_errors or tool_errors:
        err = Text("errors: ", style="bold red")
        err.append(", ".join(x for x in (_n(len(api_errors), "API error") if api_errors else "",
                                         _n(len(tool_errors), "tool error") if tool_errors else "") if x),
                   style="red")
        lines.append(err)
    lines.append(Text(""))
    return lines


def _flow(pieces: Sequence[Text], width: int) -> list[Text]:
    """Pieces joined by `` · `` on as few lines as fit ``width``: a line breaks between pieces only."""
    lines = [Text()]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + 3 + len(piece) > width:
            lines.append(Text())
        if lines[-1]:
            lines[-1].append(" · ")
        lines[-1].append_text(piece)
    return lines


def _errors(rows: Sequence[Row], open_ids: frozenset[int]) -> list[Text]:
    """Each error in full under the table (the table cuts long messages)."""
    out = []
    for r in rows:
        s = r.span
        if is_error(s, open_ids):
            err = s.attributes.get(ERROR_TYPE) or s.attributes.get(CLAUDE_CODE_TURN_OUTCOME) or "error"
            line = Text(f"✗ {s.name} at +{_duration(s.start_ns - rows[0].span.start_ns)}: {err}", style="red")
            if s.status_message and s.status_message != err:
                line.append(f": {s.status_message}")
            out.append(line)
    return out


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _legend() -> Text:
    return Text("in: input incl. cache read (cr) and write (cw) · $: estimate at list prices", style="dim")


def render_turns(turns: Sequence[TurnTrace], ss: SessionSpans, width: int = 120,
                 now_ns: int | None = None) -> RenderableType:
    """``--list``: one line per turn (an open one took until now so far). No cell is cut: the start
    loses its year before columns give way whole (named under the table)."""
    now = time.time_ns() if now_ns is None else now_ns
    rows: list[dict[str, str | Text]] = []
    for t in turns:
        s = _turn_summary(t, now)
        errors = int(s["apiErrors"]) + int(s["toolErrors"])
        rows.append({"#": str(t.index), "started (UTC)": _clock(t.start_ns),
                     "took": _duration(t.end_as_of(now) - t.start_ns),
                     "outcome": Text(str(s["outcome"]), style="bold red" if is_error(t.root, t.open_ids) else ""),
                     "calls": str(s["apiCalls"]), "tools": str(s["toolCalls"]), "agents": str(s["subagents"]),
                     "in": _compact(int(s["inputTokens"])), "out": _compact(int(s["outputTokens"])),
                     "cost $": dollars(float(s["cost"])), "errors": Text(str(errors), style="red" if errors else "")})
    names = ["#", "started (UTC)", "took", "outcome", "calls", "tools", "agents", "in", "out", "cost $", "errors"]

    def need(shown: Sequence[str]) -> int:
        return sum(max([len(n), *(len(r[n]) for r in rows)]) for n in shown) + len(shown) - 1

    shown = list(names)
    if need(shown) > width:
        for r in rows:
            r["started (UTC)"] = str(r["started (UTC)"])[5:]  # MM-DD HH:MM
    for name in ("agents", "tools", "calls"):
        if need(shown) <= width:
            break
        shown.remove(name)
    table = Table(box=None, pad_edge=False, padding=(0, 0, 0, 1), show_edge=False, header_style="bold",
                  title=f"session {ss.ref.session_id}: {_n(len(turns), 'turn')}", title_justify="left")
    for name in shown:
        table.add_column(name, justify="left" if name in ("started (UTC)", "outcome") else "right", no_wrap=True,
                         min_width=max([len(name), *(len(r[name]) for r in rows)]))
    for r in rows:
        table.add_row(*(r[n] for n in shown))
    left_out = [n for n in names if n not in shown]
    note = Text(f"not shown at this width: {', '.join(left_out)} (--json has every field)" if left_out else "",
                style="dim")
    return Group(table, note) if left_out else table


# -- JSON ------------------------------------------------------------------------------------------


def _span_json(s: SpanRecord, open_ids: frozenset[int]) -> dict[str, Any]:
    return {
        "spanId": f"{s.span_id:016x}",
        "parentSpanId": f"{s.parent_span_id:016x}" if s.parent_span_id is not None else None,
        "traceId": f"{s.trace_id:032x}",
        "name": s.name,
        "kind": s.kind.name,
        "startNs": s.start_ns,
        "endNs": s.end_ns,
        "start": _iso(s.start_ns),
        "end": _iso(s.end_ns),
        "durationS": (s.end_ns - s.start_ns) / 1e9,
        "status": s.status.name,
        "statusMessage": s.status_message,
        "open": s.span_id in open_ids,
        "attributes": dict(sorted(s.attributes.items())),
        "events": [{"name": e.name, "timeNs": e.time_ns, "attributes": e.attributes} for e in s.events],
    }


def _turn_summary(t: TurnTrace, now_ns: int) -> dict[str, Any]:
    """``durationS``: what the spans span; ``runningS``: an open turn's time so far (until now)."""
    spans = t.spans
    chats = [s for s in spans if GEN_AI_USAGE_OUTPUT_TOKENS in s.attributes]
    return {
        "turn": t.index, "traceId": f"{t.trace_id:032x}", "start": _iso(t.start_ns), "end": _iso(t.end_ns),
        "durationS": (t.end_ns - t.start_ns) / 1e9,
        "runningS": round((t.end_as_of(now_ns) - t.start_ns) / 1e9, 3) if t.is_open else None,
        "outcome": "open" if t.is_open else t.root.attributes.get(CLAUDE_CODE_TURN_OUTCOME),
        "apiCalls": sum(1 for s in spans if _kind(s) == "chat"),
        "toolCalls": sum(1 for s in spans if _kind(s) == "tool"),
        "subagents": sum(1 for s in spans if _kind(s) == "agent"),
        "apiErrors": sum(1 for s in spans if _kind(s) == "chat" and is_error(s, t.open_ids)),
        "toolErrors": sum(1 for s in spans if _kind(s) == "tool" and is_error(s, t.open_ids)),
        "inputTokens": sum(int(s.attributes.get(GEN_AI_USAGE_INPUT_TOKENS, 0)) for s in chats),
        "outputTokens": sum(int(s.attributes.get(GEN_AI_USAGE_OUTPUT_TOKENS, 0)) for s in chats),
        "cacheReadTokens": sum(int(s.attributes.get(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0)) for s in chats),
        "cacheWriteTokens": sum(int(s.attributes.get(GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, 0)) for s in chats),
        "cost": round(sum(float(s.attributes.get(CLAUDE_CODE_COST_USD, 0.0)) for s in chats), 9),
    }


def turn_json(turn: TurnTrace, ss: SessionSpans, count: int, now_ns: int | None = None) -> dict[str, Any]:
    """The turn's span tree: every span once, depth-first, each with its children nested."""
    by_id = {r.span.span_id: _span_json(r.span, turn.open_ids) for r in rows_of(turn)}
    tops = []
    for r in rows_of(turn):
        node = by_id[r.span.span_id]
        node.setdefault("children", [])
        if r.parent_span_id is None:
            tops.append(node)
        else:
            by_id[r.parent_span_id].setdefault("children", []).append(node)
    now = time.time_ns() if now_ns is None else now_ns
    return {"sessionId": ss.ref.session_id, "turns": count, **_turn_summary(turn, now), "spans": tops}


def turns_json(turns: Sequence[TurnTrace], ss: SessionSpans, now_ns: int | None = None) -> dict[str, Any]:
    now = time.time_ns() if now_ns is None else now_ns
    return {"sessionId": ss.ref.session_id, "turns": [_turn_summary(t, now) for t in turns]}


# -- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel trace`` options beyond --root (and --prices, -v) of cli.py."""
    parser.add_argument("session", help="a session id, or a unique prefix of one (at least 8 characters)")
    parser.add_argument("--turn", type=int, default=None, metavar="N",
                        help="the Nth turn (1-based; negative counts from the end; default: the last)")
    parser.add_argument("--list", action="store_true", help="list the session's turns, one line each")
    parser.add_argument("--json", action="store_true", help="the span tree (or with --list the turns) as JSON")
    parser.add_argument("--width", type=columns, default=None,
                        help="render for this many columns (default: the terminal)")
    add_stall_timeout(parser, "seconds a tool call may go without a result before it counts as orphaned")


def run(args: argparse.Namespace) -> int:
    """Exit status 0; 2 when the session is refused, not found, ambiguous, or has no such turn."""
    options = options_from_args(args)
    try:
        ref = find_session(args.session, options.roots)
        ss = collect_spans(options, ref)
        turns = turns_of(ss)
        turn = None if args.list else select_turn(turns, args.turn)
    except SessionError as exc:
        sys.stderr.write(f"ccotel trace: {exc}\n")
        return 2
    if args.json:
        doc = turns_json(turns, ss) if turn is None else turn_json(turn, ss, len(turns))
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")
        return 0
    console = stdout_console(args.width)
    if turn is None:
        console.print(render_turns(turns, ss, console.width))
    else:
        console.print(render_turn(turn, ss, len(turns), console.width))
    return 0
