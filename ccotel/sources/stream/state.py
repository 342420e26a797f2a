"""What the assembler keeps of a stream while it runs: its turns, API calls, tool calls and subagents.

Apart from the assembler because the span building (spans.py) reads the same records: each is
handed over once finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ccotel.assemble import ids

__all__ = ["Agent", "Call", "ToolUse", "Turn"]


@dataclass
class Turn:
    session_id: str
    key: str  # the prompt uuid (linked) or the first record's uuid (not linked)
    linked: bool
    start_ns: int
    last_ns: int
    calls: int = 0
    tool_calls: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    retries: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    emitted: bool = False
    ready_ns: int | None = None  # done (a result, no agent running) since then

    @property
    def trace_id(self) -> int:
        if self.linked:
            return ids.trace_id(self.session_id, self.key)
        return ids.trace_id(self.session_id, "stream", self.key)

    @property
    def span_id(self) -> int:
        if self.linked:
            return ids.span_id("turn", self.session_id, self.key)
        return ids.span_id("turn", self.session_id, "stream:" + self.key)


@dataclass
class Call:
    key: str
    message_id: str
    request_id: str | None
    turn: Turn
    parent_span_id: int
    start_ns: int
    end_ns: int
    first_uuid: str | None
    model: str | None
    agent_id: str | None
    is_sidechain: bool
    blocks: int = 0
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None
    is_api_error: bool = False
    error_text: str | None = None


@dataclass
class ToolUse:
    tool_use_id: str
    name: str
    call_key: str
    turn: Turn
    start_ns: int
    background: bool = False


@dataclass
class Agent:
    tool_use_id: str
    turn: Turn
    start_ns: int
    last_ns: int
    agent_id: str | None = None
    agent_type: str | None = None
    description: str | None = None
    spawn_depth: int | None = None
    background: bool = False
    status: str | None = None
    calls: int = 0
    tool_calls: int = 0
    done: bool = False

    def span_id(self, session_id: str) -> int:
        # Without an agent id (never seen on 2.1.x streams) the transcript's id cannot be known.
        return ids.span_id("agent", session_id, self.agent_id or "stream:" + self.tool_use_id)

