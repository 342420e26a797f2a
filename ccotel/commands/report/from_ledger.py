"""A report from the usage ledger (``ledger.db``, written as ccotel exports): opening it (only if
it was written for exactly these roots) and its answer summed in SQLite (``summarize_ledger``),
when no transcript was written since (freshness.written_since), with no transcript read."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ccotel.commands.report.rows import Query, Report
from ccotel.commands.report.summary import Rows, needs_slots, places_by_session
from ccotel.store.ledger import LEDGER_FILE, SLOT_NS, Ledger, LedgerError

if TYPE_CHECKING:
    import logging

__all__ = ["open_ledger", "summarize_ledger"]


def open_ledger(state_dir: str | None, roots: Sequence[str], host: str | None = None,
                quiet: bool = False) -> Ledger | None:
    """The ledger in ``state_dir``, if there is one and it was written for exactly these roots; on
    a PostgreSQL state (a fleet), the fleet's shared ledger (``host``: this host's id). Why one is
    not used is said in the log, unless ``quiet`` (command.run_from_ledger: logging not loaded)."""
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
        if not quiet:
            _log().warning("ledger not used: %s", exc)
        return None
    if ledger.coverage().roots != frozenset(os.path.realpath(r) for r in roots):
        if not quiet:
            _log().info("ledger %s was written for other roots (%s): reading the transcripts", path,
                        ", ".join(sorted(ledger.coverage().roots)) or "none")
        ledger.close()
        return None
    return ledger


def _log() -> logging.Logger:
    import logging  # only to say why a ledger is not used: a report from the ledger starts without it

    return logging.getLogger("ccotel.report")


def summarize_ledger(ledger: Ledger, q: Query) -> Report:
    """``summarize(gather(options, ledger), q)`` for a ledger no transcript was written after
    (``written_since`` is False), byte for byte, from the totals the ledger keeps per (session,
    model, quarter hour): one Python step per group of calls rather than per call (costs are
    integers of nano-dollars: their sum does not depend on the calls' order)."""
    by_slot = needs_slots(q)
    slot_ns = SLOT_NS if by_slot else None
    totals = ledger.call_totals(by_slot)
    where = places_by_session((sid, project, cwd) for sid, _t, _r, project, cwd in ledger.session_places())
    # a session whose calls gave both its project and cwd keeps them: its turns are not read for them
    unplaced = [sid for sid, (project, cwd) in where.items() if project is None or cwd is None]
    rows = Rows(q, places_by_session(ledger.turn_places(unplaced), where))
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
    rows.add_turns(ledger.marked_turns(), ledger.turn_times(slot_ns) if q.view == "session" else (),
                   ledger.first_turns(), with_calls, slot_ns)
    return rows.report("ledger")


def _project_rows(ledger: Ledger, rows: Rows, totals: list[tuple[Any, ...]], slot_ns: int | None) -> None:
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
