"""What the assembler builds, per session, and what spans/ reads of it.

- A Turn starts at a human prompt on the main chain (docs/spans.md; the tree: docs/format.md 7). Every later line
  belongs to the owner of its parent line (the parentUuid tree), so a dead branch left by a
  killed process stays in the turn it was written in.
- An AgentRun is a subagent: a subagent file (2.0.x flat, 2.1.x subagents/) or an inline
  sidechain of 1.0.x. It hangs under the Task/Agent tool call that spawned it, found through
  meta.json's toolUseId, toolUseResult.agentId, agent_progress lines, or the prompt text.
- A Call is one API response (message.id + requestId) written as one line per content block;
  usage is taken once, from the line with the largest output (the final snapshot).
- A ToolCall pairs a tool_use block with its tool_result.

They are mutable: the assembler fills them in line by line until they are finished (a Finished
hands one out). Session and TaskTool are the assembler's own bookkeeping of one session.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ccotel.records import AdvisorCall, Usage

__all__ = ["AgentRun", "Call", "Correction", "Finished", "Owner", "OwnerBase", "Session", "Shared", "TaskTool",
           "ToolCall", "ToolError", "Turn", "TurnOutcome"]


class ToolError(enum.Enum):
    """How a tool call failed: its span's ``error.type`` and ``ccotel_tool_calls_total{outcome}``."""

    TOOL_ERROR = "tool_error"  # the tool said it failed
    INTERRUPTED = "interrupted"  # the user pressed Esc, or its process died and a resume wrote the result
    REJECTED = "rejected"  # the user refused it
    ORPHANED = "orphaned"  # it never got a result


class TurnOutcome(enum.Enum):
    """How a turn ended: its span's ``claude_code.turn.outcome`` and ``ccotel_turns_total{outcome}``."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # the user pressed Esc
    ORPHANED = "orphaned"  # a tool call never got its result
    KILLED = "killed"  # its Claude Code process died
    INCOMPLETE = "incomplete"  # no final answer came

    @property
    def is_error(self) -> bool:
        return self in (TurnOutcome.ORPHANED, TurnOutcome.INTERRUPTED, TurnOutcome.KILLED)


@dataclass(eq=False)
class ToolCall:
    tool_use_id: str
    name: str
    call_key: str
    start_ns: int
    end_ns: int | None = None
    is_error: bool = False
    error_type: ToolError | None = None  # None: it worked
    input: object = None
    result_text: str | None = None
    agent_id: str | None = None
    background: bool = False
    repaired: bool = False  # a resumed 2.1.3xx process wrote its result: the process died during the call
    owner: Owner | None = None


@dataclass(eq=False)
class Call:
    key: str
    message_id: str
    request_id: str | None
    start_ns: int
    end_ns: int
    first_uuid: str | None
    parent_uuid: str | None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    version: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    is_sidechain: bool = False
    agent_id: str | None = None
    is_api_error: bool = False
    error_text: str | None = None
    tool_ids: list[str] = field(default_factory=list)
    lines: int = 0
    owner: Owner | None = None
    advisors: tuple[AdvisorCall, ...] = ()
    requested_model: str | None = None
    effort: str | None = None
    sent_ns: int | None = None  # its api-request line (2.1.3xx): when the request was sent
    first_line_ns: int = 0


@dataclass(eq=False)
class OwnerBase:
    session_id: str
    key: str
    start_ns: int
    last_ns: int
    span_id: int = 0
    trace_id: int | None = None  # None until the trace is known (subagents)
    parent_span_id: int | None = None
    current: Call | None = None
    superseded: Call | None = None  # the response before current, held open for stray lines
    held: list[Call] = field(default_factory=list)  # early copies kept until the owner closes (rules/transcript.py)
    open_tools: dict[str, ToolCall] = field(default_factory=dict)
    final_seen: bool = False
    closed: bool = False
    last_arrival_ns: int = 0
    uuids: list[str] = field(default_factory=list)
    waiting: list[Finished] = field(default_factory=list)  # finished before the trace was known
    version: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    entrypoint: str | None = None
    calls: int = 0
    tool_calls: int = 0
    interrupted: bool = False
    api_errors: int = 0
    api_retries: int = 0
    compactions: list[tuple[int, str | None, int | None]] = field(default_factory=list)
    # Delivery bookkeeping (pipeline.py): where the owner's lines start in each file, its API
    # calls, subagents spawned from its tool calls, spans sent but not yet acknowledged.
    first_offsets: dict[str, int] = field(default_factory=dict)
    call_keys: list[str] = field(default_factory=list)
    children: list[AgentRun] = field(default_factory=list)
    parent: Turn | AgentRun | None = None  # the owner of the tool call that spawned this subagent
    pending: int = 0
    stalled: bool = False
    # The last line was a prompt or a tool result, or a line of a response with more to come
    # (rules.response_continues): the model owes a line.
    awaiting_model: bool = False
    live: bool = False  # started while ccotel ran (not history read on a first start): counted in metrics
    orphaned_tools: int = 0
    killed: bool = False  # a repair line says its process died (2.1.3xx resume)
    unsent: bool = False  # some of its spans did not fit the trace queue: read again later (pipeline.py)

    @property
    def token(self) -> str:
        return f"{self.session_id}/{self.key}"


@dataclass(eq=False)
class Turn(OwnerBase):
    prompt_uuid: str | None = None
    trigger: str = "prompt"  # prompt | command | notification | continuation
    prompt_text: str | None = None
    outcome: TurnOutcome | None = None
    # orphaned tool calls of earlier turns this turn's conversation does not know (a dead branch)
    lost_tools: int = 0


@dataclass(eq=False)
class AgentRun(OwnerBase):
    agent_id: str | None = None  # None for 1.0.x inline sidechains
    agent_type: str | None = None
    description: str | None = None
    tool_use_id: str | None = None
    link: str | None = None  # meta | result | progress | prompt | time | none
    spawn_depth: int | None = None
    background: bool = False
    prompt_key: str | None = None
    span_emitted: bool = False


Owner = Turn | AgentRun


@dataclass(frozen=True)
class Correction:
    """A later, larger snapshot of a call whose span was already built (its final usage in a file
    read after it went out): no span of its own; the counts and the ledger go by the difference
    (run/pipeline.py). ``owner``: the owner of the line that brought it."""

    key: str
    message_id: str
    request_id: str | None
    model: str | None
    usage: Usage
    session_id: str
    time_ns: int
    owner: Turn | AgentRun


@dataclass(frozen=True)
class Finished:
    """A finished item whose trace is known; spans/build.py turns it into a span."""

    item: Turn | AgentRun | Call | ToolCall
    trace_id: int
    parent_span_id: int | None


@dataclass
class TaskTool:
    tool_use_id: str
    owner: Owner
    span_id: int
    subagent_type: str | None
    prompt_key: str | None
    background: bool
    agent_key: str | None = None


class Shared(dict[str, str]):
    """One copy of each string a session's calls and tool calls repeat line after line (version,
    cwd, branch, model, stop reason, tool name): each line's parse makes its own, and a backfill
    holds every finished item of a session until the session is read (outbox.py), then beside its
    spans, which take these strings as they are. ``shared[s]`` is the first string equal to ``s``
    (``s`` itself once ``LIMIT`` strings are kept: a bound, never a different value)."""

    LIMIT = 1024

    def __missing__(self, key: str) -> str:
        if len(self) < self.LIMIT:
            self[key] = key
        return key


@dataclass
class Session:
    session_id: str
    current_turn: Turn | None = None
    owner_of: dict[str, tuple[Owner, int]] = field(default_factory=dict)  # uuid -> (owner, ts)
    open_tools: dict[str, ToolCall] = field(default_factory=dict)
    traced_tools: set[str] = field(default_factory=set)  # every tool_use id seen in this session
    agents: dict[str, AgentRun] = field(default_factory=dict)
    task_tools: dict[str, TaskTool] = field(default_factory=dict)
    agent_links: dict[str, tuple[str, str]] = field(default_factory=dict)  # agent_id -> (tool_use_id, how)
    turn_index: list[tuple[int, int, int]] = field(default_factory=list)  # (start, trace_id, root span)
    open_owners: list[Owner] = field(default_factory=list)
    requests_sent: dict[str, int] = field(default_factory=dict)  # api-request id -> sent (until answered)
    # tool_use ids left without a result by a closed turn, until a resume repairs them or a new
    # prompt continues without them (rules/transcript.py: orphans)
    unrepaired: dict[str, str] = field(default_factory=dict)
    strings: Shared = field(default_factory=Shared)
