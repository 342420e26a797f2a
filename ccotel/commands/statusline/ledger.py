"""The ledger's part of the status line (the calls of the last day, or week when a block may have
started before it; what ``ccotel run`` recorded of the session in the last hour), from the ledger
or, while the ledger is unchanged, from what it answered last time: a snapshot per session in
``statusline/<session>.ledger.json`` under the state, kept with the ledger's signature (ledger_peek:
its files and its WAL index, read before the queries). Opening the ledger loads SQLite, which
costs more than the rest of the line; a snapshot of another signature, other roots, a window that
no longer covers what is asked, or of any other shape is not used.

The snapshot holds the rows the queries returned, in their order, from the earliest bound asked:
a later "now" only moves the bounds forward, so filtering them gives what the queries would."""

from __future__ import annotations

import os

from ccotel.commands.statusline.fastjson import loads, save
from ccotel.rules.blocks import BLOCK_NS

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LedgerPart", "ledger_part"]

_VERSION = 1
_DAY_NS = 86_400 * 1_000_000_000
_RECENT_NS = 3600 * 1_000_000_000  # what ccotel run recorded in the last hour counts as "now"


class LedgerPart:
    """The ledger's calls (as ledger_peek.calls_since gives them) and what went wrong."""

    def __init__(self, rows: list[Any], problems: list[str]) -> None:
        self.rows = rows
        self.problems = problems


def _calls(snap: dict[str, Any], midnight: int, now_ns: int) -> list[Any] | None:
    """calls_since's answer from the snapshot (the first bound, then a week back if the first
    call is within a block's length of it, as status_line asks); None: not covered."""
    first = min(midnight, now_ns - _DAY_NS)
    if snap["after"] > first:
        return None
    rows = [r for r in snap["rows"] if r[2] >= first]
    if rows and rows[0][2] - (now_ns - _DAY_NS) < BLOCK_NS:
        if snap["after"] > now_ns - 7 * _DAY_NS:
            return None
        rows = [r for r in snap["rows"] if r[2] >= now_ns - 7 * _DAY_NS]
    return rows


def _well_formed(snap: dict[str, Any]) -> bool:
    """The snapshot's shape: calls as calls_since gives them, turns as session_turns does."""
    return type(snap["after"]) is int and type(snap["recent"]) is int \
        and all(type(r) is list and len(r) == 8 and type(r[0]) is str and all(type(v) is int for v in r[2:7])
                and (r[7] is None or type(r[7]) in (float, int)) for r in snap["rows"]) \
        and all(type(t) is list and len(t) == 4 and type(t[0]) is int and all(type(v) is int for v in t[2:])
                for t in snap["turns"]) \
        and all(type(a) is int for a in snap["agents"])


def _from_snapshot(path: str, sig: list[Any], roots: list[str], sid: str, midnight: int, now_ns: int
                   ) -> LedgerPart | None:
    try:
        with open(path, "rb") as f:
            snap = loads(f.read())
        if snap["v"] != _VERSION or snap["sig"] != sig or snap["roots"] != roots or snap["sid"] != sid \
                or not _well_formed(snap):
            return None
        rows = _calls(snap, midnight, now_ns)
        if rows is None or snap["recent"] > now_ns - _RECENT_NS:
            return None
        after = now_ns - _RECENT_NS
        turns = [t for t in snap["turns"] if t[0] >= after]
        agents = sum(1 for end in snap["agents"] if end >= after)
        from ccotel.store.ledger_peek import problems

        return LedgerPart(rows, problems(turns, agents) if sid else [])
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None  # no snapshot, or a broken one: the ledger is asked


def ledger_part(state: str, roots: list[str], sid: str, safe_sid: str, midnight: int, now_ns: int
                ) -> LedgerPart | None:
    """The ledger's part, or None when there is no ledger for these roots (then the line shows no
    "today")."""
    from ccotel.store.ledger_peek import ledger_signature

    sig = ledger_signature(state)
    if sig is None:
        return None
    real_roots = sorted({os.path.realpath(r) for r in roots})
    path = os.path.join(state, "statusline", f"{safe_sid}.ledger.json") if safe_sid else None
    if path:
        found = _from_snapshot(path, sig, real_roots, sid, midnight, now_ns)
        if found is not None:
            return found
    from ccotel.store.ledger_peek import calls_since, killed_agents, open_read_only, problems, session_turns

    conn = open_read_only(state, roots)
    if conn is None:
        return None
    try:
        after = min(midnight, now_ns - _DAY_NS)
        rows = calls_since(conn, after)
        if rows and rows[0][2] - (now_ns - _DAY_NS) < BLOCK_NS:
            after = now_ns - 7 * _DAY_NS  # a block may have started before: look further back
            rows = calls_since(conn, after)
        recent = now_ns - _RECENT_NS
        turns = session_turns(conn, sid, recent) if sid else []
        agents = killed_agents(conn, sid, recent) if sid else []
    finally:
        conn.close()
    part = LedgerPart(rows or [], problems(turns or [], len(agents or [])) if sid else [])
    if path and rows is not None and turns is not None and agents is not None:
        save(path, {"v": _VERSION, "sig": sig, "roots": real_roots, "sid": sid, "after": after, "rows": rows,
                     "recent": recent, "turns": turns, "agents": agents})
    return part


