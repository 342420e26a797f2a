"""Finished items, handed out (``drain``) once their trace is known.

A subagent's lines can be read before the main file says which tool spawned it: what it finishes
meanwhile waits on the agent (``OwnerBase.waiting``) and goes out when ``set_context`` gives the
agent its trace. Calls not handed out yet are kept by key, open or finished and not drained: a
copy of one in another file may still bring its final snapshot, taken before its span is built.
A backfill drains once per session, after every file of it is read: it builds each call with its
final snapshot whichever file holds it.
"""

from __future__ import annotations

from ccotel.assemble import ids
from ccotel.assemble.model import AgentRun, Call, Correction, Finished, Owner, ToolCall, Turn

__all__ = ["Outbox"]


class Outbox:
    """The finished items of every session, in the order they finished."""

    def __init__(self) -> None:
        self.items: list[Finished] = []
        self.open_calls: dict[str, Call] = {}  # calls not emitted yet, by key: a copy elsewhere may finish them
        self.undrained: dict[str, Call] = {}  # emitted, their span not built yet (until drain)
        self.corrections: list[Correction] = []  # later snapshots of calls already built

    def emit(self, owner: Owner, item: Turn | AgentRun | Call | ToolCall) -> None:
        if owner.trace_id is None:
            owner.waiting.append(Finished(item, 0, None))
            return
        if isinstance(item, (Turn, AgentRun)):
            if isinstance(item, AgentRun):
                if item.span_emitted:
                    return
                item.span_emitted = True
            self.items.append(Finished(item, owner.trace_id, owner.parent_span_id))
        elif isinstance(item, Call):
            self.open_calls.pop(item.key, None)
            self.undrained[item.key] = item
            self.items.append(Finished(item, owner.trace_id, owner.span_id))
        else:
            parent = ids.span_id("chat", item.call_key)
            self.items.append(Finished(item, owner.trace_id, parent))

    def set_context(self, agent: AgentRun, trace: int, parent_span: int | None) -> None:
        """The agent's trace is known: what it finished meanwhile goes out."""
        agent.trace_id = trace
        agent.parent_span_id = parent_span
        waiting, agent.waiting = agent.waiting, []
        for f in waiting:
            self.emit(agent, f.item)

    def correct(self, correction: Correction) -> None:
        """A later snapshot of a call already built: handed out at the next drain (it needs no trace)."""
        self.corrections.append(correction)

    def unbuilt_call(self, key: str) -> Call | None:
        """A call whose span is not built yet (open, or finished and not drained)."""
        return self.open_calls.get(key) or self.undrained.get(key)

    def drain(self) -> list[Finished]:
        out, self.items = self.items, []
        self.undrained = {}
        return out

    def drain_corrections(self) -> list[Correction]:
        out, self.corrections = self.corrections, []
        return out
