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
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ccotel.assemble import ids
from ccotel.assemble.model import AgentRun, Call, Finished, ToolCall, ToolError, Turn, TurnOutcome
from ccotel.records import SpanEvent, SpanKind, SpanRecord, StatusCode, Usage, fast_constructor
from ccotel.rules import transcript as rules
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    CLAUDE_CODE_ADVISOR_CALLS,
    CLAUDE_CODE_AGENT_BACKGROUND,
    CLAUDE_CODE_AGENT_ID,
    CLAUDE_CODE_AGENT_LINK,
    CLAUDE_CODE_AGENT_SPAWN_DEPTH,
    CLAUDE_CODE_COMPACTION,
    CLAUDE_CODE_COMPACTION_PRE_TOKENS,
    CLAUDE_CODE_COMPACTION_TRIGGER,
    CLAUDE_CODE_COST_UNPRICED,
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_EFFORT,
    CLAUDE_CODE_ENTRYPOINT,
    CLAUDE_CODE_GIT_BRANCH,
    CLAUDE_CODE_IS_SIDECHAIN,
    CLAUDE_CODE_MESSAGE_LINES,
    CLAUDE_CODE_PARENT_UUID,
    CLAUDE_CODE_PROJECT,
    CLAUDE_CODE_REQUEST_ID,
    CLAUDE_CODE_REQUESTED_MODEL,
    CLAUDE_CODE_TOOL_AGENT_ID,
    CLAUDE_CODE_TOOL_BACKGROUND,
    CLAUDE_CODE_TOOL_REPAIRED,
    CLAUDE_CODE_TURN_API_CALLS,
    CLAUDE_CODE_TURN_API_ERRORS,
    CLAUDE_CODE_TURN_API_RETRIES,
    CLAUDE_CODE_TURN_LOST_TOOLS,
    CLAUDE_CODE_TURN_ORPHANED_TOOLS,
    CLAUDE_CODE_TURN_OUTCOME,
    CLAUDE_CODE_TURN_STALLED,
    CLAUDE_CODE_TURN_TOOL_CALLS,
    CLAUDE_CODE_TURN_TRIGGER,
    CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS,
    CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    CLAUDE_CODE_UUID,
    CLAUDE_CODE_VERSION,
    ERROR_TYPE,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    INPUT_VALUE,
    METADATA,
    SESSION_ID,
)
from ccotel.spans.content import ContentPolicy
from ccotel.spans.pricing import DEFAULT_PRICING, Pricing

__all__ = [
    "Conventions",
    "agent_attributes",
    "api_error",
    "build_span",
    "build_spans",
    "chat_attributes",
    "common_attributes",
    "project_name",
    "tool_attributes",
    "turn_attributes",
    "usage_attributes",
]

PROVIDER = "anthropic"

# SpanRecord without its frozen __init__ (one object.__setattr__ per field: a large share of a
# span's construction); records.fast_constructor checks on a probe that it is exactly equivalent.
_new_span = fast_constructor(SpanRecord, {"trace_id": 1, "span_id": 2, "parent_span_id": None, "name": "n",
                                          "kind": SpanKind.CLIENT, "start_ns": 1, "end_ns": 2,
                                          "attributes": {"a": 1}}, held=True)


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


# -- what a span of each kind carries: the transcript's items and the stream's (sources/stream) alike --


def common_attributes(owner_session: str, version: str | None, cwd: str | None, branch: str | None) -> dict[str, Any]:
    """The attributes of every span: the session it belongs to and where Claude Code ran."""
    attrs: dict[str, Any] = {GEN_AI_CONVERSATION_ID: owner_session, SESSION_ID: owner_session}
    if version:
        attrs[CLAUDE_CODE_VERSION] = version
    if cwd:
        attrs[CLAUDE_CODE_CWD] = cwd
    if branch:
        attrs[CLAUDE_CODE_GIT_BRANCH] = branch
    return attrs


_PATH_SEP = re.compile(r"[/\\]")  # Windows cwds too


def project_name(cwd: str | None) -> str | None:
    """The project a backend's list shows: the cwd's last part (``/home/u/code/ccotel`` -> ``ccotel``)."""
    if not cwd:
        return None
    return _PATH_SEP.split(cwd.rstrip("/\\"))[-1] or cwd


def turn_attributes(attrs: dict[str, Any], trigger: str | None, outcome: str | None, calls: int, tool_calls: int,
                    prompt_uuid: str | None) -> None:
    """A turn span's own attributes, after ``common_attributes``; a trigger or outcome the source cannot
    know is None. Every turn's span has the same name (the conventions'), so the project goes on it too:
    what tells turns apart in a backend's trace list and search."""
    attrs[GEN_AI_OPERATION_NAME] = "invoke_agent"
    attrs[GEN_AI_AGENT_NAME] = "claude-code"
    project = project_name(attrs.get(CLAUDE_CODE_CWD))
    if project is not None:
        attrs[CLAUDE_CODE_PROJECT] = project
        attrs[METADATA] = orjson.dumps({"project": project}).decode()
    if trigger is not None:
        attrs[CLAUDE_CODE_TURN_TRIGGER] = trigger
    if outcome is not None:
        attrs[CLAUDE_CODE_TURN_OUTCOME] = outcome
    attrs[CLAUDE_CODE_TURN_API_CALLS] = calls
    attrs[CLAUDE_CODE_TURN_TOOL_CALLS] = tool_calls
    if prompt_uuid:
        attrs[CLAUDE_CODE_UUID] = prompt_uuid


def agent_attributes(attrs: dict[str, Any], agent_type: str, link: str | None, background: bool, calls: int,
                     tool_calls: int, agent_id: str | None, description: str | None, tool_use_id: str | None,
                     spawn_depth: int | None) -> None:
    """A subagent span's own attributes; ``link`` (how its parent was found) is None where there
    was nothing to find."""
    attrs[GEN_AI_OPERATION_NAME] = "invoke_agent"
    attrs[GEN_AI_AGENT_NAME] = agent_type
    if link is not None:
        attrs[CLAUDE_CODE_AGENT_LINK] = link
    attrs[CLAUDE_CODE_AGENT_BACKGROUND] = background
    attrs[CLAUDE_CODE_TURN_API_CALLS] = calls
    attrs[CLAUDE_CODE_TURN_TOOL_CALLS] = tool_calls
    attrs[CLAUDE_CODE_IS_SIDECHAIN] = True
    if agent_id:
        attrs[CLAUDE_CODE_AGENT_ID] = agent_id
    if description:
        attrs[GEN_AI_AGENT_DESCRIPTION] = description
    if tool_use_id:
        attrs[GEN_AI_TOOL_CALL_ID] = tool_use_id
    if spawn_depth is not None:
        attrs[CLAUDE_CODE_AGENT_SPAWN_DEPTH] = spawn_depth


def chat_attributes(attrs: dict[str, Any], model: str | None, request_model: str | None, message_id: str,
                    is_sidechain: bool, lines: int, effort: str | None, time_to_first_chunk_s: float | None,
                    stop_reason: str | None, first_uuid: str | None, parent_uuid: str | None,
                    request_id: str | None, agent_id: str | None) -> None:
    """A chat span's own attributes but its usage; ``request_model`` is the model asked for (the
    answering ``model`` unless a fallback answered)."""
    attrs[GEN_AI_OPERATION_NAME] = "chat"
    attrs[GEN_AI_PROVIDER_NAME] = PROVIDER
    if message_id:  # a line with usage and no message.id is a call all the same
        attrs[GEN_AI_RESPONSE_ID] = message_id
    attrs[CLAUDE_CODE_IS_SIDECHAIN] = is_sidechain
    attrs[CLAUDE_CODE_MESSAGE_LINES] = lines
    if model:
        attrs[GEN_AI_REQUEST_MODEL] = request_model
        attrs[GEN_AI_RESPONSE_MODEL] = model
    if request_model != model:
        attrs[CLAUDE_CODE_REQUESTED_MODEL] = request_model  # a fallback answered
    if effort:
        attrs[CLAUDE_CODE_EFFORT] = effort
    if time_to_first_chunk_s is not None:
        attrs[GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = time_to_first_chunk_s
    if stop_reason:
        attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (stop_reason,)
    if first_uuid:
        attrs[CLAUDE_CODE_UUID] = first_uuid
    if parent_uuid:
        attrs[CLAUDE_CODE_PARENT_UUID] = parent_uuid
    if request_id:
        attrs[CLAUDE_CODE_REQUEST_ID] = request_id
    if agent_id:
        attrs[CLAUDE_CODE_AGENT_ID] = agent_id


def api_error(attrs: dict[str, Any], error_text: str | None) -> tuple[StatusCode, str]:
    """A chat span's failed API call: its error.type, and the span's status and message."""
    attrs[ERROR_TYPE] = rules.api_error_type(error_text)
    return StatusCode.ERROR, error_text or "api_error"


def tool_attributes(attrs: dict[str, Any], name: str, tool_use_id: str, agent_id: str | None,
                    background: bool) -> None:
    """A tool span's own attributes but its content and error; ``agent_id``: the subagent it started."""
    attrs[GEN_AI_OPERATION_NAME] = "execute_tool"
    attrs[GEN_AI_TOOL_NAME] = name
    attrs[GEN_AI_TOOL_CALL_ID] = tool_use_id
    attrs[GEN_AI_TOOL_TYPE] = "function"
    if agent_id:
        attrs[CLAUDE_CODE_TOOL_AGENT_ID] = agent_id
    if background:
        attrs[CLAUDE_CODE_TOOL_BACKGROUND] = True


def _turn(t: Turn, f: Finished, content: ContentPolicy | None) -> SpanRecord:
    outcome = t.outcome or TurnOutcome.INCOMPLETE
    attrs = common_attributes(t.session_id, t.version, t.cwd, t.git_branch)
    turn_attributes(attrs, t.trigger, outcome.value, t.calls, t.tool_calls, t.prompt_uuid)
    if t.entrypoint:
        attrs[CLAUDE_CODE_ENTRYPOINT] = t.entrypoint
    if t.api_errors:
        attrs[CLAUDE_CODE_TURN_API_ERRORS] = t.api_errors
    if t.api_retries:
        attrs[CLAUDE_CODE_TURN_API_RETRIES] = t.api_retries
    if t.stalled:
        attrs[CLAUDE_CODE_TURN_STALLED] = True
    if t.orphaned_tools:
        attrs[CLAUDE_CODE_TURN_ORPHANED_TOOLS] = t.orphaned_tools
    if t.lost_tools:
        attrs[CLAUDE_CODE_TURN_LOST_TOOLS] = t.lost_tools  # the session resumed without them: a reset
    if content is not None and t.prompt_text is not None:
        attrs[GEN_AI_INPUT_MESSAGES] = content.messages_json("user", t.prompt_text)
        attrs[INPUT_VALUE] = content.first_words(t.prompt_text)
    events = tuple(
        SpanEvent(CLAUDE_CODE_COMPACTION, ts, {k: v for k, v in
                  ((CLAUDE_CODE_COMPACTION_TRIGGER, trig), (CLAUDE_CODE_COMPACTION_PRE_TOKENS, pre))
                  if v is not None})
        for ts, trig, pre in t.compactions
    )
    error = outcome.is_error
    return _new_span({
        "trace_id": f.trace_id, "span_id": t.span_id, "parent_span_id": None,
        "name": "invoke_agent claude-code", "kind": SpanKind.INTERNAL,
        "start_ns": t.start_ns, "end_ns": max(t.last_ns, t.start_ns), "attributes": attrs,
        "status": StatusCode.ERROR if error else StatusCode.UNSET,
        "status_message": outcome.value if error else None, "events": events,
    })


def _agent(a: AgentRun, f: Finished) -> SpanRecord:
    agent_type = a.agent_type or "subagent"
    attrs = common_attributes(a.session_id, a.version, a.cwd, a.git_branch)
    agent_attributes(attrs, agent_type, a.link or "none", a.background, a.calls, a.tool_calls, a.agent_id,
                     a.description, a.tool_use_id, a.spawn_depth)
    return _new_span({
        "trace_id": f.trace_id, "span_id": a.span_id, "parent_span_id": f.parent_span_id,
        "name": f"invoke_agent {agent_type}", "kind": SpanKind.INTERNAL,
        "start_ns": a.start_ns, "end_ns": max(a.last_ns, a.start_ns), "attributes": attrs,
        "status": StatusCode.ERROR if a.interrupted else StatusCode.UNSET,
        "status_message": "interrupted" if a.interrupted else None,
    })


def _chat(c: Call, f: Finished, conventions: Conventions, pricing: Pricing) -> SpanRecord:
    model = rules.reported_model(c.model)
    attrs = common_attributes(c.owner.session_id if c.owner else "", c.version, c.cwd, c.git_branch)
    chat_attributes(attrs, model, c.requested_model or model, c.message_id, c.is_sidechain, c.lines, c.effort,
                    None if c.sent_ns is None else max(c.first_line_ns - c.sent_ns, 0) / 1e9, c.stop_reason,
                    c.first_uuid, c.parent_uuid, c.request_id, c.agent_id)
    if c.usage is not None and not c.is_api_error:  # a failed call's zero usage was never billed
        usage_attributes(attrs, model, c.usage, conventions, pricing.cost(model, c.usage, c.start_ns))
    if c.advisors:
        attrs[CLAUDE_CODE_ADVISOR_CALLS] = len(c.advisors)
    status, message = StatusCode.UNSET, None
    if c.is_api_error:
        status, message = api_error(attrs, c.error_text)
    return _new_span({
        "trace_id": f.trace_id, "span_id": ids.span_id("chat", c.key), "parent_span_id": f.parent_span_id,
        "name": f"chat {model}" if model else "chat", "kind": SpanKind.CLIENT,
        "start_ns": c.start_ns, "end_ns": max(c.end_ns, c.start_ns), "attributes": attrs,
        "status": status, "status_message": message,
    })


def usage_attributes(attrs: dict[str, Any], model: str | None, u: Usage, conventions: Conventions,
                     cost: float | None, output: bool = True) -> None:
    """A chat span's usage and cost: ``cost`` None is unpriced (a model without a price, or none named);
    ``output`` False leaves out an output count that is not final yet."""
    attrs[GEN_AI_USAGE_INPUT_TOKENS] = u.total_input
    if output:
        attrs[GEN_AI_USAGE_OUTPUT_TOKENS] = u.output_tokens
    attrs[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = u.cache_read_input_tokens
    attrs[GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] = u.cache_creation_input_tokens
    if not conventions.latest:
        attrs[GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = u.cache_creation_input_tokens
    if u.reasoning_tokens:
        attrs[GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = u.reasoning_tokens
    attrs[CLAUDE_CODE_USAGE_INPUT_TOKENS] = u.input_tokens
    if u.cache_creation_5m or u.cache_creation_1h:
        attrs[CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS] = u.cache_creation_5m
        attrs[CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS] = u.cache_creation_1h
    if cost is not None:
        attrs[CLAUDE_CODE_COST_USD] = round(cost, 9)
    else:
        attrs[CLAUDE_CODE_COST_UNPRICED] = True  # never a silent $0 (nor for a line that names no model)


def _advisor(c: Call, index: int, chat: SpanRecord, conventions: Conventions, pricing: Pricing) -> SpanRecord:
    """An advisor model consulted during the response: a call of its own, under the chat span."""
    adv = c.advisors[index]
    attrs = common_attributes(c.owner.session_id if c.owner else "", c.version, c.cwd, c.git_branch)
    attrs.update({
        GEN_AI_OPERATION_NAME: "chat",
        GEN_AI_PROVIDER_NAME: PROVIDER,
        GEN_AI_REQUEST_MODEL: adv.model,
        GEN_AI_RESPONSE_MODEL: adv.model,
        CLAUDE_CODE_ADVISOR: True,
        CLAUDE_CODE_IS_SIDECHAIN: c.is_sidechain,
    })
    if c.request_id:
        attrs[CLAUDE_CODE_REQUEST_ID] = c.request_id
    usage_attributes(attrs, adv.model, adv.usage, conventions, pricing.cost(adv.model, adv.usage, c.start_ns))
    return _new_span({
        "trace_id": chat.trace_id, "span_id": ids.span_id("chat", c.key, "advisor", str(index)),
        "parent_span_id": chat.span_id, "name": f"chat {adv.model}", "kind": SpanKind.CLIENT,
        "start_ns": chat.start_ns, "end_ns": chat.end_ns, "attributes": attrs,
    })



def _tool(t: ToolCall, f: Finished, content: ContentPolicy | None) -> SpanRecord:
    owner = t.owner
    attrs = common_attributes(owner.session_id if owner else "", owner.version if owner else None, None, None)
    tool_attributes(attrs, t.name, t.tool_use_id, t.agent_id, t.background)
    if t.repaired:
        attrs[CLAUDE_CODE_TOOL_REPAIRED] = True  # its process died; the resume wrote the result
    if content is not None:
        if t.input is not None:
            attrs[GEN_AI_TOOL_CALL_ARGUMENTS] = content.json_text(t.input)
        if t.result_text is not None:
            attrs[GEN_AI_TOOL_CALL_RESULT] = content.text(t.result_text)
    status, message = StatusCode.UNSET, None
    if t.is_error:
        named = t.error_type.value if t.error_type is not None else None
        status, message = StatusCode.ERROR, "killed, repaired on resume" if t.repaired else named
        attrs[ERROR_TYPE] = named or ToolError.TOOL_ERROR.value
    end = t.end_ns if t.end_ns is not None else t.start_ns
    return _new_span({
        # tool_use ids are unique per API call; a session copied elsewhere is another trace
        "trace_id": f.trace_id, "span_id": ids.span_id("tool", owner.session_id if owner else "", t.tool_use_id),
        "parent_span_id": f.parent_span_id,
        "name": f"execute_tool {t.name}", "kind": SpanKind.INTERNAL,
        "start_ns": t.start_ns, "end_ns": max(end, t.start_ns), "attributes": attrs,
        "status": status, "status_message": message,
    })
