"""Spans stage: a Finished item -> SpanRecords (DESIGN.md section 2).

Conventions: the OpenTelemetry GenAI semantic conventions as of
open-telemetry/semantic-conventions-genai docs/gen-ai/gen-ai-spans.md @ 9430220e and
gen-ai-agent-spans.md @ e8fc5751 (2026-11): ``gen_ai.usage.cache_write.input_tokens`` (the old
``cache_creation`` name is written too unless ``OTEL_SEMCONV_STABILITY_OPT_IN`` has
``gen_ai_latest_experimental``), ``gen_ai.usage.reasoning.output_tokens``,
``gen_ai.response.time_to_first_chunk``; the in-process ``invoke_agent`` spans carry no
``gen_ai.provider.name``, ``gen_ai.agent.id`` or usage; ``session.id`` is on every span
(Phoenix, Langfuse and Claude Code's own telemetry group sessions by it).

Names: ``invoke_agent claude-code`` per turn, ``chat {model}`` per API response (and one per
advisor call under it), ``execute_tool {tool}`` per tool call, ``invoke_agent {agentType}`` per
subagent. Raw transcript fields go under ``claude_code.*``. Content is only added when captured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ccotel.assemble import ids
from ccotel.assemble.model import AgentRun, Call, Finished, ToolCall, Turn
from ccotel.records import SpanEvent, SpanKind, SpanRecord, StatusCode, Usage, fast_constructor
from ccotel.rules import transcript as rules
from ccotel.spans.content import ContentPolicy
from ccotel.spans.pricing import DEFAULT_PRICING, Pricing

__all__ = ["Conventions", "build_span", "build_spans"]

PROVIDER = "anthropic"

# SpanRecord without its frozen __init__ (one object.__setattr__ per field: half a span's
# construction); records.fast_constructor checks on a probe that it is exactly equivalent.
_new_span = fast_constructor(SpanRecord, {"trace_id": 1, "span_id": 2, "parent_span_id": None, "name": "n",
                                          "kind": SpanKind.CLIENT, "start_ns": 1, "end_ns": 2,
                                          "attributes": {"a": 1}})


@dataclass(frozen=True)
class Conventions:
    """Which attribute names to write: ``latest`` drops the names the conventions replaced."""

    latest: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Conventions:
        raw = (os.environ if env is None else env).get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
        return cls(latest="gen_ai_latest_experimental" in {v.strip() for v in raw.split(",")})


DEFAULT_CONVENTIONS = Conventions()


def build_spans(f: Finished, content: ContentPolicy | None = None,
                conventions: Conventions = DEFAULT_CONVENTIONS, pricing: Pricing = DEFAULT_PRICING) -> list[SpanRecord]:
    """The spans of a finished item: one, plus a chat span per advisor call of a response."""
    span = build_span(f, content, conventions, pricing)
    item = f.item
    if isinstance(item, Call) and item.advisors and not item.is_api_error:
        return [span, *(_advisor(item, i, span, conventions, pricing) for i in range(len(item.advisors)))]
    return [span]


def build_span(f: Finished, content: ContentPolicy | None = None,
               conventions: Conventions = DEFAULT_CONVENTIONS, pricing: Pricing = DEFAULT_PRICING) -> SpanRecord:
    item = f.item
    if isinstance(item, Call):
        return _chat(item, f, conventions, pricing)
    if isinstance(item, ToolCall):
        return _tool(item, f, content)
    if isinstance(item, Turn):
        return _turn(item, f, content)
    return _agent(item, f)


def _common(owner_session: str, version: str | None, cwd: str | None, branch: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.conversation.id": owner_session, "session.id": owner_session}
    if version:
        attrs["claude_code.version"] = version
    if cwd:
        attrs["claude_code.cwd"] = cwd
    if branch:
        attrs["claude_code.git_branch"] = branch
    return attrs


def _turn(t: Turn, f: Finished, content: ContentPolicy | None) -> SpanRecord:
    attrs = _common(t.session_id, t.version, t.cwd, t.git_branch)
    attrs.update({
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "claude-code",
        "claude_code.turn.trigger": t.trigger,
        "claude_code.turn.outcome": t.outcome or "incomplete",
        "claude_code.turn.api_calls": t.calls,
        "claude_code.turn.tool_calls": t.tool_calls,
    })
    if t.prompt_uuid:
        attrs["claude_code.uuid"] = t.prompt_uuid
    if t.entrypoint:
        attrs["claude_code.entrypoint"] = t.entrypoint
    if t.api_errors:
        attrs["claude_code.turn.api_errors"] = t.api_errors
    if t.api_retries:
        attrs["claude_code.turn.api_retries"] = t.api_retries
    if t.stalled:
        attrs["claude_code.turn.stalled"] = True
    if t.orphaned_tools:
        attrs["claude_code.turn.orphaned_tools"] = t.orphaned_tools
    if t.lost_tools:
        attrs["claude_code.turn.lost_tools"] = t.lost_tools  # the session resumed without them: a reset
    if content is not None and t.prompt_text is not None:
        attrs["gen_ai.input.messages"] = content.messages_json("user", t.prompt_text)
    events = tuple(
        SpanEvent("claude_code.compaction", ts, {k: v for k, v in
                  (("claude_code.compaction.trigger", trig), ("claude_code.compaction.pre_tokens", pre))
                  if v is not None})
        for ts, trig, pre in t.compactions
    )
    error = t.outcome in ("orphaned", "interrupted", "killed")
    return _new_span({
        "trace_id": f.trace_id, "span_id": t.span_id, "parent_span_id": None,
        "name": "invoke_agent claude-code", "kind": SpanKind.INTERNAL,
        "start_ns": t.start_ns, "end_ns": max(t.last_ns, t.start_ns), "attributes": attrs,
        "status": StatusCode.ERROR if error else StatusCode.UNSET,
        "status_message": t.outcome if error else None, "events": events,
    })


def _agent(a: AgentRun, f: Finished) -> SpanRecord:
    agent_type = a.agent_type or "subagent"
    attrs = _common(a.session_id, a.version, a.cwd, a.git_branch)
    attrs.update({
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_type,
        "claude_code.agent.link": a.link or "none",
        "claude_code.agent.background": a.background,
        "claude_code.turn.api_calls": a.calls,
        "claude_code.turn.tool_calls": a.tool_calls,
        "claude_code.is_sidechain": True,
    })
    if a.agent_id:
        attrs["claude_code.agent_id"] = a.agent_id
    if a.description:
        attrs["gen_ai.agent.description"] = a.description
    if a.tool_use_id:
        attrs["gen_ai.tool.call.id"] = a.tool_use_id
    if a.spawn_depth is not None:
        attrs["claude_code.agent.spawn_depth"] = a.spawn_depth
    return _new_span({
        "trace_id": f.trace_id, "span_id": a.span_id, "parent_span_id": f.parent_span_id,
        "name": f"invoke_agent {agent_type}", "kind": SpanKind.INTERNAL,
        "start_ns": a.start_ns, "end_ns": max(a.last_ns, a.start_ns), "attributes": attrs,
        "status": StatusCode.ERROR if a.interrupted else StatusCode.UNSET,
        "status_message": "interrupted" if a.interrupted else None,
    })


def _chat(c: Call, f: Finished, conventions: Conventions, pricing: Pricing) -> SpanRecord:
    model = rules.reported_model(c.model)
    attrs = _common(c.owner.session_id if c.owner else "", c.version, c.cwd, c.git_branch)
    attrs.update({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.response.id": c.message_id,
        "claude_code.is_sidechain": c.is_sidechain,
        "claude_code.message.lines": c.lines,
    })
    if model:
        attrs["gen_ai.request.model"] = c.requested_model or model
        attrs["gen_ai.response.model"] = model
    if c.requested_model and c.requested_model != model:
        attrs["claude_code.requested_model"] = c.requested_model  # a fallback answered
    if c.effort:
        attrs["claude_code.effort"] = c.effort
    if c.sent_ns is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = max(c.first_line_ns - c.sent_ns, 0) / 1e9
    if c.stop_reason:
        attrs["gen_ai.response.finish_reasons"] = (c.stop_reason,)
    if c.first_uuid:
        attrs["claude_code.uuid"] = c.first_uuid
    if c.parent_uuid:
        attrs["claude_code.parent_uuid"] = c.parent_uuid
    if c.request_id:
        attrs["claude_code.request_id"] = c.request_id
    if c.agent_id:
        attrs["claude_code.agent_id"] = c.agent_id
    if c.usage is not None and not c.is_api_error:  # a failed call's zero usage was never billed
        _usage_attrs(attrs, model, c.usage, conventions, pricing.cost(model, c.usage, c.start_ns))
    if c.advisors:
        attrs["claude_code.advisor_calls"] = len(c.advisors)
    status, message = StatusCode.UNSET, None
    if c.is_api_error:
        status, message = StatusCode.ERROR, c.error_text or "api_error"
        attrs["error.type"] = rules.api_error_type(c.error_text)
    return _new_span({
        "trace_id": f.trace_id, "span_id": ids.span_id("chat", c.key), "parent_span_id": f.parent_span_id,
        "name": f"chat {model}" if model else "chat", "kind": SpanKind.CLIENT,
        "start_ns": c.start_ns, "end_ns": max(c.end_ns, c.start_ns), "attributes": attrs,
        "status": status, "status_message": message,
    })


def _usage_attrs(attrs: dict[str, Any], model: str | None, u: Usage, conventions: Conventions,
                 cost: float | None) -> None:
    attrs["gen_ai.usage.input_tokens"] = u.total_input
    attrs["gen_ai.usage.output_tokens"] = u.output_tokens
    attrs["gen_ai.usage.cache_read.input_tokens"] = u.cache_read_input_tokens
    attrs["gen_ai.usage.cache_write.input_tokens"] = u.cache_creation_input_tokens
    if not conventions.latest:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = u.cache_creation_input_tokens
    if u.reasoning_tokens:
        attrs["gen_ai.usage.reasoning.output_tokens"] = u.reasoning_tokens
    attrs["claude_code.usage.input_tokens"] = u.input_tokens
    if u.cache_creation_5m or u.cache_creation_1h:
        attrs["claude_code.usage.cache_creation.ephemeral_5m_input_tokens"] = u.cache_creation_5m
        attrs["claude_code.usage.cache_creation.ephemeral_1h_input_tokens"] = u.cache_creation_1h
    if cost is not None:
        attrs["claude_code.cost.usd"] = round(cost, 9)
    elif model is not None:
        attrs["claude_code.cost.unpriced"] = True  # never a silent $0


def _advisor(c: Call, index: int, chat: SpanRecord, conventions: Conventions, pricing: Pricing) -> SpanRecord:
    """An advisor model consulted during the response: a call of its own, under the chat span."""
    adv = c.advisors[index]
    attrs = _common(c.owner.session_id if c.owner else "", c.version, c.cwd, c.git_branch)
    attrs.update({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": adv.model,
        "gen_ai.response.model": adv.model,
        "claude_code.advisor": True,
        "claude_code.is_sidechain": c.is_sidechain,
    })
    if c.request_id:
        attrs["claude_code.request_id"] = c.request_id
    _usage_attrs(attrs, adv.model, adv.usage, conventions, pricing.cost(adv.model, adv.usage, c.start_ns))
    return _new_span({
        "trace_id": chat.trace_id, "span_id": ids.span_id("chat", c.key, "advisor", str(index)),
        "parent_span_id": chat.span_id, "name": f"chat {adv.model}", "kind": SpanKind.CLIENT,
        "start_ns": chat.start_ns, "end_ns": chat.end_ns, "attributes": attrs,
    })



def _tool(t: ToolCall, f: Finished, content: ContentPolicy | None) -> SpanRecord:
    owner = t.owner
    attrs = _common(owner.session_id if owner else "", owner.version if owner else None, None, None)
    attrs.update({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": t.name,
        "gen_ai.tool.call.id": t.tool_use_id,
        "gen_ai.tool.type": "function",
    })
    if t.agent_id:
        attrs["claude_code.tool.agent_id"] = t.agent_id
    if t.background:
        attrs["claude_code.tool.background"] = True
    if t.repaired:
        attrs["claude_code.tool.repaired"] = True  # its process died; the resume wrote the result
    if content is not None:
        if t.input is not None:
            attrs["gen_ai.tool.call.arguments"] = content.json_text(t.input)
        if t.result_text is not None:
            attrs["gen_ai.tool.call.result"] = content.text(t.result_text)
    status, message = StatusCode.UNSET, None
    if t.is_error:
        status, message = StatusCode.ERROR, "killed, repaired on resume" if t.repaired else t.error_type
        attrs["error.type"] = t.error_type or "tool_error"
    end = t.end_ns if t.end_ns is not None else t.start_ns
    return _new_span({
        # tool_use ids are unique per API call; a session copied elsewhere is another trace
        "trace_id": f.trace_id, "span_id": ids.span_id("tool", owner.session_id if owner else "", t.tool_use_id),
        "parent_span_id": f.parent_span_id,
        "name": f"execute_tool {t.name}", "kind": SpanKind.INTERNAL,
        "start_ns": t.start_ns, "end_ns": max(end, t.start_ns), "attributes": attrs,
        "status": status, "status_message": message,
    })
