"""The usage ledger's rows made of the spans the pipeline builds (``ledger.Ledger.record``): kept
apart from ledger.py so that a report read from the ledger does not load rules and records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import rules
from .ledger import Rows, project_dir_of
from .records import SpanRecord, StatusCode

__all__ = ["rows_of"]


def rows_of(spans: Sequence[SpanRecord]) -> Rows:
    """The ledger rows (calls, tools, agents, turns) these spans say, as the upserts take them."""
    calls: list[tuple[Any, ...]] = []
    tools: list[tuple[Any, ...]] = []
    agents: list[tuple[Any, ...]] = []
    turns: list[tuple[Any, ...]] = []
    chat_keys: dict[int, str] = {}  # chat span id -> call key (advisor spans follow their chat span)
    advisors_seen: dict[int, int] = {}
    for s in spans:
        a = s.attributes
        op = a.get("gen_ai.operation.name")
        if op == "chat":
            key = _chat_key(s, chat_keys, advisors_seen)
            if key is not None:
                calls.append(_call_values(key, s))
        elif op == "execute_tool":
            tools.append(_tool_values(s))
        elif op == "invoke_agent" and a.get("gen_ai.agent.name") == "claude-code" \
                and "claude_code.turn.outcome" in a:
            turns.append(_turn_values(s))
        elif op == "invoke_agent":
            agents.append(_agent_values(s))
    return calls, tools, agents, turns


def _chat_key(s: SpanRecord, chat_keys: dict[int, str], advisors_seen: dict[int, int]) -> str | None:
    """The call's identity. An advisor span carries no message id: it is the i-th advisor span
    under its chat span, which spans.build_spans puts just before it in the same list."""
    a = s.attributes
    if a.get("claude_code.advisor"):
        parent = chat_keys.get(s.parent_span_id or 0)
        if parent is None:
            return None  # its chat span was not in this batch: cannot be named (never seen from spans.py)
        index = advisors_seen.get(s.parent_span_id or 0, 0)
        advisors_seen[s.parent_span_id or 0] = index + 1
        return f"{parent}#advisor{index}"
    mid = a.get("gen_ai.response.id")
    if not isinstance(mid, str) or not mid:
        return None
    rid = a.get("claude_code.request_id")
    key = rules.call_key(mid, rid if isinstance(rid, str) else None)
    chat_keys[s.span_id] = key
    return key


def _int(a: dict[str, Any], name: str) -> int:
    v = a.get(name, 0)
    return int(v) if isinstance(v, (int, float)) else 0


def _str(a: dict[str, Any], name: str) -> str | None:
    v = a.get(name)
    return v if isinstance(v, str) and v else None


def _project(a: dict[str, Any]) -> str | None:
    # The transcript's projects/<dir>, when spans carry it; else the dir Claude Code makes of the cwd.
    return _str(a, "claude_code.project_dir") or project_dir_of(_str(a, "claude_code.cwd"))


def _call_values(key: str, s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    api_error = s.status is StatusCode.ERROR and "error.type" in a
    cost = a.get("claude_code.cost.usd")
    fresh = _int(a, "claude_code.usage.input_tokens")
    cache_read = _int(a, "gen_ai.usage.cache_read.input_tokens")
    cache_write = _int(a, "gen_ai.usage.cache_write.input_tokens")
    return (key, _str(a, "gen_ai.conversation.id") or "", s.end_ns, s.start_ns, _str(a, "claude_code.cwd"),
            _project(a), _str(a, "gen_ai.response.model"), _str(a, "claude_code.agent_id"), int(api_error),
            fresh, _int(a, "gen_ai.usage.output_tokens"), cache_read, cache_write,
            _int(a, "claude_code.usage.cache_creation.ephemeral_5m_input_tokens"),
            _int(a, "claude_code.usage.cache_creation.ephemeral_1h_input_tokens"),
            _int(a, "gen_ai.usage.reasoning.output_tokens"),
            float(cost) if isinstance(cost, (int, float)) else None, int(isinstance(cost, (int, float))),
            _str(a, "claude_code.version"))


def _tool_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    error = _str(a, "error.type") if s.status is StatusCode.ERROR else None
    return (_str(a, "gen_ai.conversation.id") or "", _str(a, "gen_ai.tool.call.id") or f"{s.span_id:016x}",
            s.start_ns, s.end_ns, _str(a, "gen_ai.tool.name") or "", _str(a, "claude_code.tool.agent_id"), error,
            int(bool(a.get("claude_code.tool.repaired"))))


def _agent_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    return (_str(a, "gen_ai.conversation.id") or "", _str(a, "claude_code.agent_id") or f"{s.span_id:016x}",
            s.start_ns, s.end_ns, _str(a, "gen_ai.agent.name") or "subagent",
            int(bool(a.get("claude_code.agent.background"))), int(s.status is StatusCode.ERROR))


def _turn_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    return (_str(a, "gen_ai.conversation.id") or "", f"{s.span_id:016x}", s.start_ns, s.end_ns,
            _str(a, "claude_code.cwd"), _project(a), _str(a, "claude_code.version"),
            _str(a, "claude_code.turn.outcome") or "incomplete", _int(a, "claude_code.turn.api_calls"),
            _int(a, "claude_code.turn.tool_calls"), _int(a, "claude_code.turn.api_errors"),
            _int(a, "claude_code.turn.orphaned_tools"), _int(a, "claude_code.turn.lost_tools"),
            int(bool(a.get("claude_code.turn.stalled"))))
