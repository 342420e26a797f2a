"""Summing a report's data into the rows of its view: which row each call, tool call, subagent
and turn goes to (by its session or by its local date), and whether it is inside --since/--until.
from_ledger.py sums a ledger's totals into the same rows."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from ccotel.commands.report.rows import CallSums, Data, Query, Report, Row
from ccotel.store.ledger import SLOT_NS, CallRow, TurnRow, nano_usd

__all__ = ["Dates", "Rows", "summarize", "turn_sums", "needs_slots", "call_sums", "merge_sums", "places_by_session",
           "place_items", "in_time_order"]

class Dates:
    """Unix ns -> the local date in a zone (the system's when None), cached per quarter hour."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self.cache: dict[int, date] = {}

    def __call__(self, ns: int) -> date:
        slot = ns // SLOT_NS  # zone offsets change on quarter hours: one date lookup per slot
        d = self.cache.get(slot)
        if d is None:
            sec = slot * (SLOT_NS // 1_000_000_000)
            if self.tz is None:
                d = date(*time.localtime(sec)[:3])
            else:
                d = datetime.fromtimestamp(sec, self.tz).date()
            self.cache[slot] = d
        return d



class Rows:
    """The rows of one report as they are summed: which row an item goes to, and whether it is
    inside --since/--until (both decided by the item's quarter hour and session)."""

    def __init__(self, q: Query, where: dict[str, tuple[str | None, str | None]]) -> None:
        self.q = q
        self.where = where
        self.dates = Dates(q.tz)
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

    def add_turns(self, marked: Iterable[tuple[str, int, int, int]], times: Iterable[tuple[Any, ...]],
                  first_turns: dict[str, int], with_calls: set[str], slot_ns: int | None) -> None:
        """Kills and resets; in the session view a session's first prompt starts it; ghosts. From
        the killed and reset turns (session, time, killed, reset) and each session's first turn
        time, both in time order (a project's row takes its place from the session that made it),
        and the turns' earliest and latest times per (session, slot) (``turn_sums`` or the
        ledger's). A session's prompts count as its activity when it has a row once its calls,
        tools, subagents, kills and resets are in."""
        for sid, ns, killed, reset in marked:
            if self.inside(ns):
                r = self.row(ns, sid)
                r.seen(ns)
                r.kills += killed
                r.resets += reset
        if self.q.view == "session":  # a session starts with its first prompt
            rows = self.rows
            for sid, slot, first, last in times:
                started = rows.get(sid)
                if started is not None and self.inside(slot * (slot_ns or 0)):  # any time in the slot
                    started.seen(first or 0)
                    started.seen(last)
        for sid, ns in first_turns.items():  # a ghost: prompts and no assistant record at all
            if sid not in with_calls and self.inside(ns):
                r = self.row(ns, sid)
                r.ghosts += 1
                r.resets += 1  # reason missing_transcript, as ccotel_session_resets_total counts it

    def mark_unrecorded(self, calls: Iterable[CallRow]) -> None:
        """The rows of calls the ledger lacks do not know their tool calls, subagents and health."""
        for c in calls:
            if self.inside(c.time_ns):
                self.row(c.time_ns, c.session_id).partial = True

    def report(self, source: str, unknown_reason: str | None = None) -> Report:
        q = self.q
        ordered = sorted(self.rows.values(), key=(lambda r: (r.last_ns, r.key)) if q.view == "session" else
                         (lambda r: (r.key,)), reverse=q.order == "desc")
        totals = Row("total")
        for r in ordered:
            totals.merge(r)
        return Report(q.view, ordered, totals, source, unknown_reason)


def summarize(data: Data, q: Query) -> Report:
    """Sum the data into the rows of ``q.view`` (items outside --since/--until left out)."""
    turns = in_time_order(data.turns)
    slot_ns = SLOT_NS if needs_slots(q) else None
    summed = data.summed
    if summed is None:
        places = [(c.session_id, c.project, c.cwd) for c in data.calls]
        sums = call_sums(data.calls, slot_ns)
    else:  # summed per quarter hour as read: one sum per session and model when the view needs no more
        places = summed.places
        sums = summed.sums if slot_ns else merge_sums({}, summed.sums.items(), by_slot=False)
    rows = Rows(q, places_by_session(places + [(t.session_id, t.project, t.cwd) for t in turns]))
    with_calls = set()
    for (sid, model, failed, slot), (n, *usage, priced, cost, first_ns, last_ns) in sums.items():
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
    rows.add_turns(*turn_sums(turns, slot_ns), with_calls, slot_ns)
    rows.mark_unrecorded(data.unrecorded)
    return rows.report(data.source, data.unknown_reason)


def turn_sums(turns: Sequence[TurnRow], slot_ns: int | None
              ) -> tuple[list[tuple[str, int, int, int]], list[tuple[Any, ...]], dict[str, int]]:
    """Turns in time order (in_time_order) as the ledger gives them to Rows.add_turns: the killed
    and reset ones (marked_turns), the times per (session, slot) (turn_times), each session's
    first turn time (first_turns)."""
    marked = []
    times: dict[tuple[str, int], list[Any]] = {}
    first_turns: dict[str, int] = {}
    for t in turns:
        ns = t.time_ns
        killed, reset = t.outcome == "killed", t.lost_tools > 0  # reset: resumed without an orphaned call
        if killed or reset:
            marked.append((t.session_id, ns, int(killed), int(reset)))
        key = (t.session_id, ns // slot_ns if slot_ns else 0)
        span = times.get(key)
        if span is None:
            span = times[key] = [None, ns]
        if ns and (span[0] is None or ns < span[0]):
            span[0] = ns
        span[1] = max(span[1], ns)
        first_turns.setdefault(t.session_id, ns)
    return marked, [(sid, slot, *span) for (sid, slot), span in times.items()], first_turns


def needs_slots(q: Query) -> bool:
    """Do the rows depend on when a call was made (its quarter hour), or on its session alone?"""
    return not (q.view in ("session", "project") and q.since is None and q.until is None)


def call_sums(calls: Iterable[CallRow], slot_ns: int | None) -> CallSums:
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


def merge_sums(into: CallSums, sums: Iterable[tuple[tuple[str, str | None, bool, int], Sequence[int]]],
               by_slot: bool = True) -> CallSums:
    """Add sums (of later calls) to ``into`` as ``call_sums`` would have summed their calls: the
    same sums in the same order (``by_slot`` False: each slot's sums into slot 0)."""
    for key, s in sums:
        if not by_slot:
            key = (key[0], key[1], key[2], 0)
        have = into.get(key)
        if have is None:
            into[key] = list(s)
            continue
        have[:10] = [a + b for a, b in zip(have[:10], s[:10], strict=True)]
        if s[10]:
            have[10] = min(have[10], s[10]) if have[10] else s[10]
        have[11] = max(have[11], s[11])
    return into


def place_items(places: Iterable[tuple[str, str | None, str | None]]) -> list[tuple[str, str | None, str | None]]:
    """The (session, project, cwd) items that can change ``places_by_session``'s answer, in their
    order: a session's first, its first with a project and its first with a cwd (after those its
    place is set). Given these instead of all, also after other items, it answers the same."""
    out: list[tuple[str, str | None, str | None]] = []
    first: set[str] = set()
    with_project: set[str] = set()
    with_cwd: set[str] = set()
    for item in places:
        sid, project, cwd = item
        new = sid not in first
        if new or (project and sid not in with_project) or (cwd and sid not in with_cwd):
            out.append(item)
            first.add(sid)
            if project:
                with_project.add(sid)
            if cwd:
                with_cwd.add(sid)
    return out


def places_by_session(places: Iterable[tuple[str, str | None, str | None]],
                      out: dict[str, tuple[str | None, str | None]] | None = None
                      ) -> dict[str, tuple[str | None, str | None]]:
    """Each session's project dir and cwd (the first known), from (session, project, cwd): its
    calls in time order, then its turns; ``out``: the places so far, gone on from (and filled)."""
    out = {} if out is None else out
    for sid, project, cwd in places:
        have = out.get(sid)
        if have is None or (have[1] is None and cwd) or (have[0] is None and project):
            out[sid] = (project or (have[0] if have else None), cwd or (have[1] if have else None))
    return out


def in_time_order(turns: Iterable[TurnRow]) -> list[TurnRow]:
    """Turns by time (ties by span id): whatever order they were written in, a session without a
    call is placed by its earliest turn, and the rows its turns make are made in one order."""
    return sorted(turns, key=lambda t: (t.time_ns, t.span_id))


def _period(d: date, q: Query) -> str:
    if q.view == "daily":
        return d.isoformat()
    if q.view == "monthly":
        return f"{d.year:04d}-{d.month:02d}"
    return (d - timedelta(days=(d.weekday() - q.start_of_week) % 7)).isoformat()  # weekly: its first day
