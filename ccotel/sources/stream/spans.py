"""The stream's finished turns, calls, tool calls and subagents (state.py) -> SpanRecords.

Built by the transcript path's span builder (ccotel/spans/build.py), so that a span the stream
and the transcript both give carries the same attributes written the same way; what only the
relay writes is added after: ``ccotel.source``, ``ccotel.relay.*``, a subagent's status and the
turn's result and retries (results.py). The stream's usage is the ``message_start`` snapshot:
its input side is final, its ``output_tokens`` a placeholder until a stop_reason is there (not
exported then), and nothing is priced (the result's cost is on the turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ccotel.assemble import ids
from ccotel.records import SpanEvent, SpanKind, SpanRecord, StatusCode, Usage
from ccotel.rules import transcript as rules
from ccotel.sources.stream.results import int_or_zero, result_attributes, retry_attributes
from ccotel.sources.stream.state import Agent, Call, ToolUse, Turn
from ccotel.spans.attributes import (
    CCOTEL_AGENT_STATUS,
    CCOTEL_API_RETRY,
    CCOTEL_RELAY_LINKED,
    CCOTEL_RELAY_OUTPUT_TOKENS_FINAL,
    CCOTEL_RESULT_COUNT,
    CCOTEL_SOURCE,
    CCOTEL_TURN_API_RETRIES,
    ERROR_TYPE,
    GEN_AI_TOOL_CALL_ID,
)
from ccotel.spans.build import (
    Conventions,
    agent_attributes,
    api_error,
    chat_attributes,
    common_attributes,
    tool_attributes,
    turn_attributes,
    usage_attributes,
)

__all__ = ["Origin", "agent_span", "chat_span", "tool_span", "turn_span"]

# The relay has always written the latest names only, whatever OTEL_SEMCONV_STABILITY_OPT_IN says.
_LATEST = Conventions(latest=True)


@dataclass(frozen=True)
class Origin:
    """The session a span belongs to, as the stream has told so far (``system/init``)."""

    session_id: str
    version: str | None
    cwd: str | None


def _common(o: Origin) -> dict[str, Any]:
    attrs = common_attributes(o.session_id, o.version, o.cwd, None)
    attrs[CCOTEL_SOURCE] = "stream"
    return attrs


def chat_span(c: Call, o: Origin) -> SpanRecord:
    model = rules.reported_model(c.model)
    attrs = _common(o)
    chat_attributes(attrs, model, model, c.message_id, c.is_sidechain, c.blocks, None, None, c.stop_reason,
                    c.first_uuid, None, c.request_id, c.agent_id)
    if c.usage is not None and not c.is_api_error:
        final = c.stop_reason is not None
        # no model: the relay prices nothing, so it says nothing about pricing either
        usage_attributes(attrs, None, _usage(c.usage), _LATEST, None, output=final)
        if not final:
            attrs[CCOTEL_RELAY_OUTPUT_TOKENS_FINAL] = False
    status, message = StatusCode.UNSET, None
    if c.is_api_error:
        status, message = api_error(attrs, c.error_text)
    return SpanRecord(
        trace_id=c.turn.trace_id, span_id=ids.span_id("chat", c.key), parent_span_id=c.parent_span_id,
        name=f"chat {model}" if model else "chat", kind=SpanKind.CLIENT, start_ns=c.start_ns,
        end_ns=max(c.end_ns, c.start_ns), attributes=attrs, status=status, status_message=message,
    )


def _usage(u: dict[str, Any]) -> Usage:
    return Usage(input_tokens=int_or_zero(u.get("input_tokens")), output_tokens=int_or_zero(u.get("output_tokens")),
                 cache_read_input_tokens=int_or_zero(u.get("cache_read_input_tokens")),
                 cache_creation_input_tokens=int_or_zero(u.get("cache_creation_input_tokens")))


def tool_span(t: ToolUse, o: Origin, agent_id: str | None, end_ns: int, error: str | None) -> SpanRecord:
    """``agent_id``: the subagent the tool call started, if any."""
    attrs = _common(o)
    tool_attributes(attrs, t.name, t.tool_use_id, agent_id, t.background)
    if error:
        attrs[ERROR_TYPE] = error
    return SpanRecord(
        trace_id=t.turn.trace_id, span_id=ids.span_id("tool", o.session_id, t.tool_use_id),
        parent_span_id=ids.span_id("chat", t.call_key), name=f"execute_tool {t.name}", kind=SpanKind.INTERNAL,
        start_ns=t.start_ns, end_ns=max(end_ns, t.start_ns), attributes=attrs,
        status=StatusCode.ERROR if error else StatusCode.UNSET, status_message=error,
    )


def agent_span(ag: Agent, o: Origin) -> SpanRecord:
    agent_type = ag.agent_type or "subagent"
    attrs = _common(o)
    agent_attributes(attrs, agent_type, None, ag.background, ag.calls, ag.tool_calls, ag.agent_id, ag.description,
                     ag.tool_use_id, ag.spawn_depth)
    if not ag.tool_use_id:
        attrs[GEN_AI_TOOL_CALL_ID] = ag.tool_use_id  # the stream's subagent always has its tool call, even ""
    if ag.status:
        attrs[CCOTEL_AGENT_STATUS] = ag.status
    failed = ag.status in ("failed", "killed", "stopped")
    return SpanRecord(
        trace_id=ag.turn.trace_id, span_id=ag.span_id(o.session_id),
        parent_span_id=ids.span_id("tool", o.session_id, ag.tool_use_id), name=f"invoke_agent {agent_type}",
        kind=SpanKind.INTERNAL, start_ns=ag.start_ns, end_ns=max(ag.last_ns, ag.start_ns), attributes=attrs,
        status=StatusCode.ERROR if failed else StatusCode.UNSET, status_message=ag.status if failed else None,
    )


def turn_span(t: Turn, o: Origin) -> SpanRecord:
    attrs = _common(o)
    # the stream says neither what started a turn nor how it ended: its result does (results.py)
    turn_attributes(attrs, None, None, t.calls, t.tool_calls, t.key if t.linked else None)
    attrs[CCOTEL_RELAY_LINKED] = t.linked
    if t.results:
        attrs.update(result_attributes(t.results[-1]))
        if len(t.results) > 1:
            attrs[CCOTEL_RESULT_COUNT] = len(t.results)
    if t.retries:
        attrs[CCOTEL_TURN_API_RETRIES] = len(t.retries)
    events = tuple(SpanEvent(CCOTEL_API_RETRY, ts, retry_attributes(r)) for ts, r in t.retries)
    last = t.results[-1] if t.results else {}
    error = last.get("is_error") is True
    return SpanRecord(
        trace_id=t.trace_id, span_id=t.span_id, parent_span_id=None, name="invoke_agent claude-code",
        kind=SpanKind.INTERNAL, start_ns=t.start_ns, end_ns=max(t.last_ns, t.start_ns), attributes=attrs,
        status=StatusCode.ERROR if error else StatusCode.UNSET,
        status_message=str(last.get("terminal_reason") or last.get("subtype")) if error else None, events=events,
    )
