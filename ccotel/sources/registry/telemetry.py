"""What the registry exports of an agent once it is judged: its ``invoke_agent`` span (pointing at
the first turn of the Claude Code session it ran, as the transcript path traces it) and its counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ccotel.assemble import ids
from ccotel.read.layout import main_transcripts
from ccotel.read.parse import parse_line
from ccotel.read.regular import open_regular
from ccotel.records import SpanKind, SpanRecord, StatusCode
from ccotel.rules import transcript as rules
from ccotel.sources.registry.agents import (
    SPAWN_SLACK_NS,
    Agent,
    Outcome,
    agent_depth,
    agent_parent,
    agent_times,
    agent_type,
)
from ccotel.spans.attributes import (
    CLAUDE_CODE_REGISTRY_AGENT_ID,
    CLAUDE_CODE_REGISTRY_DEPTH,
    CLAUDE_CODE_REGISTRY_DIR,
    CLAUDE_CODE_REGISTRY_OUTCOME,
    CLAUDE_CODE_REGISTRY_PARENT_ID,
    CLAUDE_CODE_REGISTRY_PID,
    CLAUDE_CODE_REGISTRY_SESSION_LINK,
    CLAUDE_CODE_REGISTRY_SESSION_SPAN_ID,
    CLAUDE_CODE_REGISTRY_SESSION_TRACE_ID,
    ERROR_TYPE,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    SESSION_ID,
)

__all__ = ["AGENTS", "AGENT_SECONDS", "BAD_INPUT", "KILLED", "METRIC_NAMES", "Counter", "count", "first_turn",
           "span"]

# The series the registry counts (metrics/counters.py declares them: see METRICS there).
AGENTS = "ccotel_registry_agents"
AGENT_SECONDS = "ccotel_registry_agent_seconds"
KILLED = "ccotel_registry_killed_agents"
BAD_INPUT = "ccotel_registry_bad_input"
METRIC_NAMES = (AGENTS, AGENT_SECONDS, KILLED, BAD_INPUT)

_MAX_TRANSCRIPT_BYTES = 8 << 20  # read this much of a session's transcript for the agent's first prompt


class Counter(Protocol):
    """What the registry needs of ccotel.metrics.Metrics."""

    def inc(self, name: str, *labels: str, value: float = 1.0, channel: str = "read") -> None: ...


def count(metrics: Counter, agent: Agent, outcome: str, now: int) -> None:
    """The counts of a judged agent (once per agent: the caller's mark says so)."""
    type_, depth = agent_type(agent), _depth_label(agent_depth(agent))
    metrics.inc(AGENTS, type_, outcome, depth)
    start, end = agent_times(agent, now)
    metrics.inc(AGENT_SECONDS, type_, outcome, depth, value=max(end - start, 0) / 1e9)
    if outcome == Outcome.KILLED:
        metrics.inc(KILLED)  # unlabelled: exposed at 0 from the start, for an alert's increase()


def span(agent: Agent, outcome: str, now: int, directory: str, agents: Mapping[str, Agent]) -> SpanRecord:
    """The agent's ``invoke_agent`` span: in the trace of its root agent, under its parent."""
    front = agent.front
    assert front is not None
    type_ = agent_type(agent)
    parent = agent_parent(agent)
    attrs: dict[str, Any] = {
        GEN_AI_OPERATION_NAME: "invoke_agent",
        GEN_AI_AGENT_NAME: type_,
        CLAUDE_CODE_REGISTRY_AGENT_ID: agent.agent_id,
        CLAUDE_CODE_REGISTRY_OUTCOME: outcome,
        CLAUDE_CODE_REGISTRY_DIR: directory,
    }
    depth = agent_depth(agent)
    if depth is not None:
        attrs[CLAUDE_CODE_REGISTRY_DEPTH] = depth
    if parent is not None:
        attrs[CLAUDE_CODE_REGISTRY_PARENT_ID] = parent
    if agent.entry is not None and agent.entry.pid is not None:
        attrs[CLAUDE_CODE_REGISTRY_PID] = agent.entry.pid
    if front.task:
        attrs[GEN_AI_AGENT_DESCRIPTION] = front.task
    link = agent.session
    if link is not None:
        attrs[SESSION_ID] = attrs[GEN_AI_CONVERSATION_ID] = link.session_id
        attrs[CLAUDE_CODE_REGISTRY_SESSION_LINK] = link.how
        turn = first_turn((link.root,), link.session_id, front.started_ns)
        if turn is not None:
            # The session's first turn of this agent (its trace is the transcript path's):
            # where a span link would point (SpanRecord carries no links yet).
            attrs[CLAUDE_CODE_REGISTRY_SESSION_TRACE_ID] = f"{turn[0]:032x}"
            attrs[CLAUDE_CODE_REGISTRY_SESSION_SPAN_ID] = f"{turn[1]:016x}"
    else:
        attrs[CLAUDE_CODE_REGISTRY_SESSION_LINK] = "none"
    start, end = agent_times(agent, now)
    error = outcome in (Outcome.FAILED, Outcome.KILLED)
    if error:
        attrs[ERROR_TYPE] = outcome
    return SpanRecord(
        trace_id=ids.trace_id("registry", _root_of(agents, agent.agent_id)),
        span_id=ids.span_id("registry", agent.agent_id),
        parent_span_id=ids.span_id("registry", parent) if parent is not None else None,
        name=f"invoke_agent {type_}", kind=SpanKind.INTERNAL, start_ns=start, end_ns=max(end, start),
        attributes=attrs, status=StatusCode.ERROR if error else StatusCode.UNSET,
        status_message=outcome if error else None,
    )


def _root_of(agents: Mapping[str, Agent], agent_id: str) -> str:
    """The agent at the top of this one's parents: its trace. (A parent is written to the
    registry before its children are spawned, so the chain is known when a child is judged.)"""
    seen = {agent_id}
    while True:
        agent = agents.get(agent_id)
        parent = agent_parent(agent) if agent is not None else None
        if parent is None or parent in seen:
            return agent_id
        seen.add(parent)
        agent_id = parent


def _depth_label(depth: int | None) -> str:
    """Bounded label values: 0-9, then 10+."""
    if depth is None:
        return "unknown"
    return str(depth) if 0 <= depth < 10 else "10+"


def first_turn(roots: tuple[str, ...], session_id: str, since_ns: int | None) -> tuple[int, int] | None:
    """(trace id, span id) of the first turn of ``session_id`` started at ``since_ns`` or later,
    as the transcript path builds them (assemble/: a prompt's turn), from its main transcript."""
    for _root, path in main_transcripts(roots, session_id):
        return _first_prompt(path, session_id, since_ns)
    return None


def _first_prompt(path: str, session_id: str, since_ns: int | None) -> tuple[int, int] | None:
    try:
        with open_regular(path) as f:
            data = f.read(_MAX_TRANSCRIPT_BYTES)
    except OSError:
        return None
    offset = 0
    for line in data.split(b"\n"):
        for e in parse_line(line, offset).entries:
            if e.type != "user" or e.is_sidechain or not e.uuid or rules.classify_user(e) != "prompt":
                continue
            if since_ns is not None and e.timestamp_ns is not None and e.timestamp_ns < since_ns - SPAWN_SLACK_NS:
                continue  # a turn of the session from before this agent (a resume)
            return ids.trace_id(session_id, e.uuid), ids.span_id("turn", session_id, e.uuid)
        offset += len(line) + 1
    return None
