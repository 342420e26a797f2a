"""The usage ledger's rows made of the spans the pipeline builds (``ledger.Ledger.record``): kept
apart from ledger.py so that a report read from the ledger does not load rules and records
(ledger.py imports this module only when it records, and never the other way round)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ccotel.records import SpanRecord, StatusCode
from ccotel.rules import transcript as rules

__all__ = ["rows_of", "Rows", "project_dir_of"]

# The rows as the ledger's upserts take them: calls, tools, agents, turns (each a list of value tuples).
Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def project_dir_of(cwd: str | None) -> str | None:
    """The projects/<dir> name Claude Code gives a cwd: every non-alphanumeric becomes '-'."""
    return _NOT_ALNUM.sub("-", cwd) if cwd else None


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
    return _as_int(a.get(name, 0))


def _str(a: dict[str, Any], name: str) -> str | None:
    v = a.get(name)
    return v if isinstance(v, str) and v else None


def _as_int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) else 0


# A cwd's projects/<dir> (a regex substitution) once per cwd: a history has a few dozen.
_PROJECT_OF: dict[str, str | None] = {}


def _project_of_cwd(cwd: str | None) -> str | None:
    if cwd is None:
        return None
    project = _PROJECT_OF.get(cwd)
    if project is None:
        project = project_dir_of(cwd)
        if len(_PROJECT_OF) >= 1024:
            _PROJECT_OF.clear()
        _PROJECT_OF[cwd] = project
    return project


def _project(a: dict[str, Any]) -> str | None:
    # The transcript's projects/<dir>, when spans carry it; else the dir Claude Code makes of the cwd.
    return _str(a, "claude_code.project_dir") or _project_of_cwd(_str(a, "claude_code.cwd"))


# The call row's counts, in its column order: fresh input, output, cache read, cache write, 5m, 1h, reasoning.
_CALL_COUNTS = ("claude_code.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
                "gen_ai.usage.cache_write.input_tokens", "claude_code.usage.cache_creation.ephemeral_5m_input_tokens",
                "claude_code.usage.cache_creation.ephemeral_1h_input_tokens", "gen_ai.usage.reasoning.output_tokens")


def _call_values(key: str, s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    api_error = s.status is StatusCode.ERROR and "error.type" in a
    cost: Any = a.get("claude_code.cost.usd")
    priced = isinstance(cost, (int, float))
    # _int of each count, with plain ints (all spans.py writes) taken as they are: one call a row, not seven
    counts = [v if type(v) is int else _as_int(v) for v in map(a.get, _CALL_COUNTS)]
    return (key, _str(a, "gen_ai.conversation.id") or "", s.end_ns, s.start_ns, _str(a, "claude_code.cwd"),
            _project(a), _str(a, "gen_ai.response.model"), _str(a, "claude_code.agent_id"), int(api_error),
            *counts, float(cost) if priced else None, int(priced), _str(a, "claude_code.version"))


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
