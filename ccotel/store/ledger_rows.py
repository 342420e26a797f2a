"""The usage ledger's rows made of the spans the pipeline builds (``ledger.Ledger.record``): kept
apart from ledger.py so that a report read from the ledger does not load rules and records
(ledger.py imports this module only when it records, and never the other way round)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ccotel.read.layout import project_dir_of
from ccotel.records import SpanRecord, StatusCode
from ccotel.rules import transcript as rules
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    CLAUDE_CODE_AGENT_BACKGROUND,
    CLAUDE_CODE_AGENT_ID,
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_PROJECT_DIR,
    CLAUDE_CODE_REQUEST_ID,
    CLAUDE_CODE_TOOL_AGENT_ID,
    CLAUDE_CODE_TOOL_REPAIRED,
    CLAUDE_CODE_TURN_API_CALLS,
    CLAUDE_CODE_TURN_API_ERRORS,
    CLAUDE_CODE_TURN_LOST_TOOLS,
    CLAUDE_CODE_TURN_ORPHANED_TOOLS,
    CLAUDE_CODE_TURN_OUTCOME,
    CLAUDE_CODE_TURN_STALLED,
    CLAUDE_CODE_TURN_TOOL_CALLS,
    CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS,
    CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    CLAUDE_CODE_UUID,
    CLAUDE_CODE_VERSION,
    ERROR_TYPE,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
)

__all__ = ["rows_of", "Rows"]

# The rows as the ledger's upserts take them: calls, tools, agents, turns (each a list of value tuples).
Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]



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
        op = a.get(GEN_AI_OPERATION_NAME)
        if op == "chat":
            key = _chat_key(s, chat_keys, advisors_seen)
            if key is not None:
                calls.append(_call_values(key, s))
        elif op == "execute_tool":
            tools.append(_tool_values(s))
        elif op == "invoke_agent" and a.get(GEN_AI_AGENT_NAME) == "claude-code" \
                and CLAUDE_CODE_TURN_OUTCOME in a:
            turns.append(_turn_values(s))
        elif op == "invoke_agent":
            agents.append(_agent_values(s))
    return calls, tools, agents, turns


def _chat_key(s: SpanRecord, chat_keys: dict[int, str], advisors_seen: dict[int, int]) -> str | None:
    """The call's identity. An advisor span carries no message id: it is the i-th advisor span
    under its chat span, which spans.build_spans puts just before it in the same list."""
    a = s.attributes
    if a.get(CLAUDE_CODE_ADVISOR):
        parent = chat_keys.get(s.parent_span_id or 0)
        if parent is None:
            return None  # its chat span was not in this batch: cannot be named (never seen from spans/build.py)
        index = advisors_seen.get(s.parent_span_id or 0, 0)
        advisors_seen[s.parent_span_id or 0] = index + 1
        return f"{parent}#advisor{index}"
    mid, rid, uuid = a.get(GEN_AI_RESPONSE_ID), a.get(CLAUDE_CODE_REQUEST_ID), a.get(CLAUDE_CODE_UUID)
    key = rules.line_call_key(mid if isinstance(mid, str) else None, rid if isinstance(rid, str) else None,
                              uuid if isinstance(uuid, str) else None)
    if key is None:
        return None
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
    return _str(a, CLAUDE_CODE_PROJECT_DIR) or _project_of_cwd(_str(a, CLAUDE_CODE_CWD))


# The call row's counts, in its column order: fresh input, output, cache read, cache write, 5m, 1h, reasoning.
_CALL_COUNTS = (CLAUDE_CODE_USAGE_INPUT_TOKENS, GEN_AI_USAGE_OUTPUT_TOKENS, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS,
                CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS, GEN_AI_USAGE_REASONING_OUTPUT_TOKENS)


def _call_values(key: str, s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    api_error = s.status is StatusCode.ERROR and ERROR_TYPE in a
    cost: Any = a.get(CLAUDE_CODE_COST_USD)
    priced = isinstance(cost, (int, float))
    # _int of each count, with plain ints (all spans/build.py writes) taken as they are: one call a row, not seven
    counts = [v if type(v) is int else _as_int(v) for v in map(a.get, _CALL_COUNTS)]
    return (key, _str(a, GEN_AI_CONVERSATION_ID) or "", s.end_ns, s.start_ns, _str(a, CLAUDE_CODE_CWD),
            _project(a), _str(a, GEN_AI_RESPONSE_MODEL), _str(a, CLAUDE_CODE_AGENT_ID), int(api_error),
            *counts, float(cost) if priced else None, int(priced), _str(a, CLAUDE_CODE_VERSION))


def _tool_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    error = _str(a, ERROR_TYPE) if s.status is StatusCode.ERROR else None
    return (_str(a, GEN_AI_CONVERSATION_ID) or "", _str(a, GEN_AI_TOOL_CALL_ID) or f"{s.span_id:016x}",
            s.start_ns, s.end_ns, _str(a, GEN_AI_TOOL_NAME) or "", _str(a, CLAUDE_CODE_TOOL_AGENT_ID), error,
            int(bool(a.get(CLAUDE_CODE_TOOL_REPAIRED))))


def _agent_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    return (_str(a, GEN_AI_CONVERSATION_ID) or "", _str(a, CLAUDE_CODE_AGENT_ID) or f"{s.span_id:016x}",
            s.start_ns, s.end_ns, _str(a, GEN_AI_AGENT_NAME) or "subagent",
            int(bool(a.get(CLAUDE_CODE_AGENT_BACKGROUND))), int(s.status is StatusCode.ERROR))


def _turn_values(s: SpanRecord) -> tuple[Any, ...]:
    a = s.attributes
    return (_str(a, GEN_AI_CONVERSATION_ID) or "", f"{s.span_id:016x}", s.start_ns, s.end_ns,
            _str(a, CLAUDE_CODE_CWD), _project(a), _str(a, CLAUDE_CODE_VERSION),
            _str(a, CLAUDE_CODE_TURN_OUTCOME) or "incomplete", _int(a, CLAUDE_CODE_TURN_API_CALLS),
            _int(a, CLAUDE_CODE_TURN_TOOL_CALLS), _int(a, CLAUDE_CODE_TURN_API_ERRORS),
            _int(a, CLAUDE_CODE_TURN_ORPHANED_TOOLS), _int(a, CLAUDE_CODE_TURN_LOST_TOOLS),
            int(bool(a.get(CLAUDE_CODE_TURN_STALLED))))
