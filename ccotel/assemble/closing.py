"""When owners close, and what closing one finishes: its held calls, its open tool calls (orphaned
or interrupted), the owner itself with its outcome.

Time closes a turn (``tick``, ``flush``): a final answer after ``quiet_ns``, a turn that owes
nothing after ``idle_ns``, a tool call or a reply owed for ``stall_ns`` (stalled; orphaned or
incomplete unless its process is known to run), at once when its process is known to be gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccotel.assemble.model import Owner, Session, ToolError, Turn, TurnOutcome
from ccotel.assemble.outbox import Outbox
from ccotel.rules import transcript as rules

__all__ = ["STALL_TIMEOUT_NS", "Timeouts", "close", "flush_session", "open_owners", "release_superseded",
           "tick_session"]


# --stall-timeout's default: a tool call or a reply owed this long is stalled
STALL_TIMEOUT_NS = 180_000_000_000


@dataclass(frozen=True)
class Timeouts:
    # A final answer (stop_reason end_turn) ends its turn after this much quiet.
    quiet_ns: int = 1_000_000_000
    # A turn with no open tool call and no final stop_reason (older versions never write one).
    idle_ns: int = 60_000_000_000
    # A tool call with no result for this long is orphaned (--stall-timeout).
    stall_ns: int = STALL_TIMEOUT_NS


def open_owners(sess: Session) -> list[Owner]:
    return [o for o in sess.open_owners if not o.closed]


def tick_session(sess: Session, owners: list[Owner], now_ns: int, running: bool | None, t: Timeouts,
                 out: Outbox) -> None:
    """Close what time has finished of one session's open owners (``running``: whether its
    process still runs, None when unknown)."""
    for owner in owners:
        release_superseded(owner, out)
        quiet = now_ns - _last_activity(sess, owner)
        owes = bool(owner.open_tools) or owner.awaiting_model
        if running is False and (owes or not owner.final_seen):
            close(sess, owner, TurnOutcome.KILLED, out)
        elif owes and quiet >= t.stall_ns:
            owner.stalled = True
            if running is True:
                continue  # a long tool or a slow model: stalled, not dead
            if owner.open_tools:
                close(sess, owner, TurnOutcome.ORPHANED, out)
            elif quiet >= 2 * t.stall_ns:
                close(sess, owner, TurnOutcome.INCOMPLETE, out)  # no reply ever came
        elif owner.open_tools:
            continue
        elif owner.final_seen and quiet >= t.quiet_ns:
            close(sess, owner, TurnOutcome.COMPLETED, out)
        elif quiet >= t.idle_ns and not owes:
            close(sess, owner, TurnOutcome.INCOMPLETE, out)


def flush_session(sess: Session, owners: list[Owner], now_ns: int | None, running: bool | None, t: Timeouts,
                  out: Outbox) -> int:
    """End of a backfill pass for one session: close every owner that is safe to close; returns
    how many stay open (see Assembler.flush). An owner that owes a tool result or a reply while its
    process runs stays open however long it has waited, as tick_session keeps it live: a catch-up
    (a restart of ``ccotel run``) must not export as orphaned the long tool the live path waits for."""
    kept = 0
    for owner in owners:
        quiet = None if now_ns is None else now_ns - _last_activity(sess, owner)
        owes = bool(owner.open_tools) or owner.awaiting_model
        if running is False and (owes or not owner.final_seen):
            close(sess, owner, TurnOutcome.KILLED, out)  # its process is gone: nothing more will come
        elif running is True and owes:
            kept += 1  # a long tool or a slow model of a process that runs: stalled maybe, not over (as tick)
        elif not owner.open_tools and (quiet is None or owner.final_seen or quiet >= t.idle_ns):
            close(sess, owner, TurnOutcome.COMPLETED if owner.final_seen else TurnOutcome.INCOMPLETE, out)
        elif owner.open_tools and (quiet is None or quiet >= t.stall_ns):
            close(sess, owner, TurnOutcome.ORPHANED, out)
        else:
            kept += 1  # recent and unfinished: its session may still be running
    return kept


def release_superseded(owner: Owner, out: Outbox) -> None:
    if owner.superseded is not None:
        call, owner.superseded = owner.superseded, None
        if call.stop_reason is None and rules.writes_final_usage(call.version):
            owner.held.append(call)  # an early copy: its final snapshot may be in another file
        else:
            out.emit(owner, call)


def close(sess: Session, owner: Owner, outcome: TurnOutcome, out: Outbox) -> None:
    if owner.closed:
        return
    release_superseded(owner, out)
    if owner.current is not None:
        call, owner.current = owner.current, None
        out.emit(owner, call)
    held, owner.held = owner.held, []
    for call in held:
        out.emit(owner, call)
    if owner.killed and outcome is not TurnOutcome.INTERRUPTED:
        outcome = TurnOutcome.KILLED
    for tool in list(owner.open_tools.values()):
        sess.open_tools.pop(tool.tool_use_id, None)
        tool.end_ns = max(owner.last_ns, tool.start_ns)
        tool.is_error = True
        tool.error_type = ToolError.INTERRUPTED if owner.interrupted else ToolError.ORPHANED
        if tool.error_type is ToolError.ORPHANED:
            owner.orphaned_tools += 1
            if len(sess.unrepaired) < 256:
                sess.unrepaired[tool.tool_use_id] = tool.name
        out.emit(owner, tool)
    owner.open_tools.clear()
    owner.closed = True
    for uuid in owner.uuids:
        found = sess.owner_of.get(uuid)
        if found is not None and found[0] is owner:
            del sess.owner_of[uuid]
    owner.uuids = []
    if owner in sess.open_owners:
        sess.open_owners.remove(owner)
    if isinstance(owner, Turn):
        owner.outcome = TurnOutcome.INTERRUPTED if owner.interrupted and outcome is not TurnOutcome.KILLED else outcome
        if sess.current_turn is owner:
            sess.current_turn = None
    out.emit(owner, owner)


def _last_activity(sess: Session, owner: Owner, depth: int = 0) -> int:
    """Latest line of the owner or of a subagent still working for one of its open tool calls:
    a main file is silent while its foreground subagents run."""
    last = max(owner.last_ns, owner.last_arrival_ns)
    if depth > 8:
        return last
    for tool_id in owner.open_tools:
        task = sess.task_tools.get(tool_id)
        agent = sess.agents.get(task.agent_key) if task and task.agent_key else None
        if agent is not None:
            last = max(last, _last_activity(sess, agent, depth + 1))
    return last
