"""The stream-json stage: what ``claude -p --output-format stream-json --verbose`` prints -> SpanRecords.

Pure: no I/O and no clocks (callers pass each line's arrival time); relay.py reads the stream,
passes it on and exports what this module builds.

What the stream carries (Claude Code 2.1.197 and 2.1.330, tests/fixtures/**/runs/*/stdout.jsonl):
``system/init`` (session_id, cwd, model, claude_code_version), one ``assistant`` record per content
block with the transcript line's ``uuid``, ``message.id`` and ``request_id`` (usage is the
``message_start`` snapshot: ``output_tokens`` 1, ``stop_reason`` null), ``user`` records (tool
results, subagent prompts) with the transcript line's ``uuid``, ``parent_tool_use_id`` on every
record of a subagent (the Agent/Task tool_use that spawned it), ``system/task_started`` (``task_id``
= the agentId, ``tool_use_id``, ``subagent_type``), ``task_notification`` (the agent finished),
``system/api_retry`` and one ``result`` per turn (two when a background agent's notification
starts another round). It does not carry the prompt's uuid, which the transcript path derives a
turn's trace id from: ``resolve_prompt`` (relay.py reads it from the transcript) supplies it.

Ids (ccotel/ids.py, as spans.py and assemble.py derive them): turn
``span_id("turn", session, prompt uuid)`` in trace ``trace_id(session, prompt uuid)``; chat
``span_id("chat", call_key(message.id, request_id))``; tool ``span_id("tool", session,
tool_use_id)``; subagent ``span_id("agent", session, agentId)``. A turn whose prompt cannot be
found gets ids of its own (``ccotel.relay.linked = false``): the transcript path has no copy then.

Producers that repeat cumulative content arrays (each record holding every block so far) are
deduplicated per agent context by a fingerprint of the first block: a new fingerprint means the
context switched, so the array is processed again from its start; blocks already seen (by id)
are dropped, no block is ever dropped on a switch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ccotel.assemble import ids
from ccotel.records import SpanEvent, SpanKind, SpanRecord, StatusCode
from ccotel.rules import transcript as rules
from ccotel.spans.attributes import (
    CCOTEL_AGENT_STATUS,
    CCOTEL_API_RETRY,
    CCOTEL_API_RETRY_ERROR,
    CCOTEL_API_RETRY_PREFIX,
    CCOTEL_RELAY_LINKED,
    CCOTEL_RELAY_OUTPUT_TOKENS_FINAL,
    CCOTEL_RESULT_COUNT,
    CCOTEL_RESULT_MODEL_USAGE_COST_USD,
    CCOTEL_RESULT_MODEL_USAGE_MODELS,
    CCOTEL_RESULT_MODEL_USAGE_PREFIX,
    CCOTEL_RESULT_PERMISSION_DENIALS,
    CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS,
    CCOTEL_RESULT_PREFIX,
    CCOTEL_RESULT_USAGE_PREFIX,
    CCOTEL_SOURCE,
    CCOTEL_TURN_API_RETRIES,
    CLAUDE_CODE_AGENT_BACKGROUND,
    CLAUDE_CODE_AGENT_ID,
    CLAUDE_CODE_AGENT_SPAWN_DEPTH,
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_IS_SIDECHAIN,
    CLAUDE_CODE_MESSAGE_LINES,
    CLAUDE_CODE_REQUEST_ID,
    CLAUDE_CODE_TOOL_AGENT_ID,
    CLAUDE_CODE_TOOL_BACKGROUND,
    CLAUDE_CODE_TURN_API_CALLS,
    CLAUDE_CODE_TURN_TOOL_CALLS,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    CLAUDE_CODE_UUID,
    CLAUDE_CODE_VERSION,
    ERROR_TYPE,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    SESSION_ID,
)

__all__ = [
    "BAD_LINE_REASONS",
    "BlockDedupe",
    "Counter",
    "StreamAssembler",
    "block_id",
    "fingerprint",
    "parse_record",
]

# Why a line was passed through without being understood (ccotel_relay_bad_lines_total{reason}).
BAD_LINE_REASONS = ("malformed_json", "invalid_utf8", "not_an_object", "truncated", "line_too_long")

#: ``count(metric, labels, value)``: relay.py hands it to ccotel.metrics.Metrics.inc.
Counter = Callable[[str, tuple[str, ...], float], None]
#: ``resolve_prompt(session_id, uuid)``: the uuid of the prompt line whose turn holds ``uuid``.
PromptResolver = Callable[[str, str], str | None]

_MAIN = ""  # the context key of the main agent (subagents: their parent_tool_use_id)
_LABEL_MAX = 64


def parse_record(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A stream line -> (record, None), (None, bad-line reason), or (None, None) for a blank line."""
    if not data.strip():
        return None, None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None, "invalid_utf8"
        return None, "malformed_json"
    if not isinstance(obj, dict):
        return None, "not_an_object"
    return obj, None


def fingerprint(block: object) -> str:
    """The first block of a content array: ``tool_use:{id}``, ``thinking:``/``text:`` plus its
    first 64 characters, otherwise ``{type}:{tool_use_id}``."""
    if not isinstance(block, dict):
        return f"{type(block).__name__}:"
    kind = block.get("type")
    if kind == "tool_use":
        return f"tool_use:{block.get('id')}"
    if kind in ("thinking", "text"):
        return f"{kind}:{str(block.get(kind) or '')[:64]}"
    return f"{kind}:{block.get('tool_use_id')}"


def block_id(block: object, message_id: str | None) -> str:
    """What identifies a block when a producer emits it again: its tool_use id (or the tool_use_id
    it answers), else its message and fingerprint."""
    if isinstance(block, dict):
        if isinstance(block.get("id"), str):
            return f"id:{block['id']}"
        if isinstance(block.get("tool_use_id"), str):
            return f"{block.get('type')}:{block['tool_use_id']}"
    return f"{message_id}|{fingerprint(block)}"


@dataclass
class _DedupeState:
    fingerprint: str | None = None
    message_id: str | None = None
    index: int = 0
    seen: set[str] = field(default_factory=set)


class BlockDedupe:
    """New blocks of content arrays, per agent context (see the module docstring)."""

    def __init__(self, count: Counter | None = None) -> None:
        self._contexts: dict[tuple[str, str], _DedupeState] = {}
        self._count = count or (lambda _name, _labels, _value: None)

    def new_blocks(self, context: tuple[str, str], message_id: str | None, content: list[Any]) -> list[Any]:
        if not content:
            return []
        st = self._contexts.setdefault(context, _DedupeState())
        fp = fingerprint(content[0])
        if st.fingerprint is not None and (fp != st.fingerprint or message_id != st.message_id
                                           or len(content) < st.index):
            st.index = 0  # another array (the context switched): read it again from its start
            self._count("ccotel_relay_context_switches", (), 1.0)
        st.fingerprint, st.message_id = fp, message_id
        out = []
        for block in content[st.index:]:
            key = block_id(block, message_id)
            if key in st.seen:
                self._count("ccotel_relay_repeated_blocks", (), 1.0)
                continue
            st.seen.add(key)
            out.append(block)
        st.index = len(content)
        return out


# -- the assembly ------------------------------------------------------------------------------


@dataclass
class _Turn:
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
class _Call:
    key: str
    message_id: str
    request_id: str | None
    turn: _Turn
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
class _Tool:
    tool_use_id: str
    name: str
    call_key: str
    turn: _Turn
    start_ns: int
    background: bool = False


@dataclass
class _Agent:
    tool_use_id: str
    turn: _Turn
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


@dataclass
class _Context:
    """One agent's thread on the stream: the main agent or a subagent (by parent_tool_use_id)."""

    last_ns: int = 0
    call: _Call | None = None


class StreamAssembler:
    """Stream records -> finished SpanRecords (``drain``), with the transcript path's ids."""

    def __init__(self, resolve_prompt: PromptResolver | None = None, count: Counter | None = None,
                 grace_ns: int = 2_000_000_000) -> None:
        self.grace_ns = grace_ns
        self._resolve = resolve_prompt or (lambda _sid, _uuid: None)
        self._count = count or (lambda _name, _labels, _value: None)
        self._dedupe = BlockDedupe(self._count)
        self.session_id = ""
        self.version: str | None = None
        self.cwd: str | None = None
        self._turn: _Turn | None = None  # the turn of the current round (until its result)
        self._open_turns: list[_Turn] = []  # turns whose span is not out yet
        self._segment_resolved = False  # the current round's turn is known
        self._round_uuid: str | None = None  # the round's last main-agent line before its first answer
        self._round_start_ns = 0
        self._pending_retries: list[tuple[int, dict[str, Any]]] = []  # before the round's turn is known
        self._contexts: dict[str, _Context] = {}
        self._tools: dict[str, _Tool] = {}
        self._agents: dict[str, _Agent] = {}  # by the tool_use id that spawned them
        self._model_usage: dict[tuple[str, str], float] = {}  # cumulative modelUsage figures seen
        self._out: list[SpanRecord] = []

    # -- public API --------------------------------------------------------------------------

    def add(self, rec: dict[str, Any], now_ns: int) -> None:
        sid = rec.get("session_id")
        if isinstance(sid, str) and sid:
            self.session_id = sid
        kind, subtype = rec.get("type"), rec.get("subtype")
        if kind == "assistant":
            self._assistant(rec, now_ns)
        elif kind == "user":
            self._user(rec, now_ns)
        elif kind == "result":
            self._result(rec, now_ns)
        elif kind == "system":
            self._system(rec, subtype, now_ns)

    def finish(self, now_ns: int) -> None:
        """The stream ended: whatever is open is finished now."""
        for ctx in self._contexts.values():
            self._end_call(ctx)
        for tool in list(self._tools.values()):
            self._end_tool(tool, now_ns, error="orphaned")
        for agent in self._agents.values():
            self._end_agent(agent, now_ns)
        for turn in list(self._open_turns):
            self._emit_turn(turn, now_ns)

    def drain(self) -> list[SpanRecord]:
        out, self._out = self._out, []
        return out

    # -- records -----------------------------------------------------------------------------

    def _context_key(self, rec: dict[str, Any]) -> str:
        parent = rec.get("parent_tool_use_id")
        return parent if isinstance(parent, str) and parent else _MAIN

    def _context(self, key: str) -> _Context:
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = _Context()
        return ctx

    def _turn_for(self, ctx_key: str, rec: dict[str, Any], now_ns: int) -> _Turn:
        """The turn a record belongs to: its subagent's, or the main agent's current one."""
        if ctx_key != _MAIN:
            agent = self._agent_for(ctx_key, rec, now_ns)
            return agent.turn
        if not self._segment_resolved:
            self._start_round(_uuid(rec), now_ns)
        assert self._turn is not None
        return self._turn

    def _start_round(self, uuid: str | None, now_ns: int) -> None:
        """The first main-agent answer after the start or a result (or the result itself): find
        its turn's prompt from ``uuid`` (the answer's, or the round's last main-agent line)."""
        prompt = self._resolve(self.session_id, uuid) if uuid and self.session_id else None
        key, linked = (prompt, True) if prompt else (uuid or f"t{now_ns}", False)
        turn = next((t for t in self._open_turns if t.key == key and t.linked == linked), None)
        if turn is None:
            for old in list(self._open_turns):
                if old.results:
                    self._emit_turn(old, now_ns)  # a new prompt: the turns before are over
                # else its result is still to come (2.1.x prints a notification round's results
                # together, at the end): the turn goes out with it
            turn = _Turn(self.session_id, key, linked, self._round_start_ns or now_ns, now_ns)
            self._open_turns.append(turn)
        self._turn = turn
        self._segment_resolved = True
        self._round_uuid, self._round_start_ns = None, 0
        turn.retries.extend(self._pending_retries)
        self._pending_retries = []

    def _agent_for(self, tool_use_id: str, rec: dict[str, Any] | None, now_ns: int) -> _Agent:
        agent = self._agents.get(tool_use_id)
        if agent is None:
            tool = self._tools.get(tool_use_id)
            turn = tool.turn if tool is not None else self._turn_or_round(rec, now_ns)
            agent = self._agents[tool_use_id] = _Agent(tool_use_id, turn, now_ns, now_ns)
            agent.background = tool.background if tool is not None else False
        if rec is not None:
            agent_id = rec.get("agent_id") or rec.get("task_id")
            if isinstance(agent_id, str) and agent_id and agent.agent_id is None:
                agent.agent_id = agent_id
            agent.last_ns = max(agent.last_ns, now_ns)
        return agent

    def _turn_or_round(self, rec: dict[str, Any] | None, now_ns: int) -> _Turn:
        if self._turn is None or not self._segment_resolved:
            self._start_round(self._round_uuid or _uuid(rec or {}), now_ns)
        assert self._turn is not None
        return self._turn

    def _assistant(self, rec: dict[str, Any], now_ns: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        ctx_key = self._context_key(rec)
        turn = self._turn_for(ctx_key, rec, now_ns)
        turn.last_ns = max(turn.last_ns, now_ns)
        ctx = self._context(ctx_key)
        content = _list(msg.get("content"))
        message_id = msg.get("id") if isinstance(msg.get("id"), str) else None
        blocks = self._dedupe.new_blocks(("assistant", ctx_key), message_id, content)
        is_error = rec.get("is_api_error_message") is True or (rec.get("error") is not None and
                                                               msg.get("model") == rules.SYNTHETIC_MODEL)
        model = msg.get("model") if isinstance(msg.get("model"), str) else None
        if message_id is None or not rules.is_api_call(model, None, is_error):
            ctx.last_ns = now_ns
            return  # a line Claude Code wrote itself: no API call
        request_id = rec.get("request_id") if isinstance(rec.get("request_id"), str) else None
        key = rules.call_key(message_id, request_id)
        call = ctx.call
        if call is None or call.key != key:
            self._end_call(ctx)
            call = ctx.call = self._new_call(ctx_key, ctx, turn, key, message_id, request_id, rec, now_ns)
        call.end_ns = max(call.end_ns, now_ns)
        call.blocks += len(blocks)
        call.model = model or call.model
        if isinstance(msg.get("usage"), dict):
            call.usage = msg["usage"]
        if isinstance(msg.get("stop_reason"), str):
            call.stop_reason = msg["stop_reason"]
        if is_error:
            call.is_api_error = True
            call.error_text = next((str(b.get("text")) for b in content if isinstance(b, dict)
                                    and b.get("type") == "text"), None)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                self._tool_use(ctx_key, call, block, now_ns)
        ctx.last_ns = now_ns

    def _new_call(self, ctx_key: str, ctx: _Context, turn: _Turn, key: str, message_id: str,
                  request_id: str | None, rec: dict[str, Any], now_ns: int) -> _Call:
        if ctx_key == _MAIN:
            parent, agent_id = turn.span_id, None
            turn.calls += 1
        else:
            agent = self._agent_for(ctx_key, rec, now_ns)
            parent, agent_id = agent.span_id(self.session_id), agent.agent_id
            agent.calls += 1
        start = ctx.last_ns or (turn.start_ns if ctx_key == _MAIN else now_ns)
        uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
        return _Call(key=key, message_id=message_id, request_id=request_id, turn=turn, parent_span_id=parent,
                     start_ns=min(start, now_ns), end_ns=now_ns, first_uuid=uuid, model=None, agent_id=agent_id,
                     is_sidechain=ctx_key != _MAIN)

    def _tool_use(self, ctx_key: str, call: _Call, block: dict[str, Any], now_ns: int) -> None:
        tool_id = str(block["id"])
        if tool_id in self._tools:
            return
        name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
        info = _dict(block.get("input"))
        tool = _Tool(tool_id, str(name), call.key, call.turn, now_ns,
                     background=info.get("run_in_background") is True)
        self._tools[tool_id] = tool
        if ctx_key == _MAIN:
            call.turn.tool_calls += 1
        else:
            self._agent_for(ctx_key, None, now_ns).tool_calls += 1
        if name in rules.TASK_TOOLS and tool_id not in self._agents:
            agent = self._agent_for(tool_id, None, now_ns)
            agent.agent_type = info.get("subagent_type") if isinstance(info.get("subagent_type"), str) else None
            agent.description = info.get("description") if isinstance(info.get("description"), str) else None

    def _user(self, rec: dict[str, Any], now_ns: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        ctx_key = self._context_key(rec)
        if ctx_key == _MAIN and not self._segment_resolved:
            # A line before the round's first answer (a prompt echoed, a compaction summary, a
            # command's output): the turn is found from the answer, or from the last such line
            # when the round ends without one (a /compact).
            self._round_uuid = _uuid(rec) or self._round_uuid
            self._round_start_ns = self._round_start_ns or now_ns
            self._context(ctx_key).last_ns = now_ns
            return
        turn = self._turn_for(ctx_key, rec, now_ns)
        turn.last_ns = max(turn.last_ns, now_ns)
        ctx = self._context(ctx_key)
        ctx.last_ns = now_ns
        content = _list(msg.get("content"))
        result = _dict(rec.get("tool_use_result"))
        for block in self._dedupe.new_blocks(("user", ctx_key), None, content):
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            tool = self._tools.get(str(block.get("tool_use_id")))
            if tool is None:
                continue
            agent_id = result.get("agentId")
            if isinstance(agent_id, str) and tool.tool_use_id in self._agents:
                self._agents[tool.tool_use_id].agent_id = self._agents[tool.tool_use_id].agent_id or agent_id
            if result.get("status") == "async_launched" or result.get("isAsync") is True:
                tool.background = True
                if tool.tool_use_id in self._agents:
                    self._agents[tool.tool_use_id].background = True
            text = _result_text(block.get("content"))
            error = None
            if text.startswith(rules.INTERRUPT_PREFIX) or result.get("interrupted") is True:
                error = "interrupted"
            elif rules.is_repair_text(text):
                error = "interrupted"
            elif block.get("is_error") is True:
                error = "tool_error"
            self._end_tool(tool, now_ns, error)
            agent = self._agents.get(tool.tool_use_id)
            if agent is not None and not tool.background and result.get("status") not in (None, "async_launched"):
                self._end_agent(agent, now_ns)  # a foreground agent's result: it is done

    def _system(self, rec: dict[str, Any], subtype: object, now_ns: int) -> None:
        if subtype == "init":
            # Each query of the process starts with one: a notification's answer (2.1.197 writes it
            # after a second init, with no result in between) is another round, its turn found again.
            self._segment_resolved = False
            version = rec.get("claude_code_version")
            self.version = version if isinstance(version, str) else self.version
            self.cwd = rec.get("cwd") if isinstance(rec.get("cwd"), str) else self.cwd
        elif subtype == "api_retry":
            self._api_retry(rec, now_ns)
        elif subtype == "task_started" and isinstance(rec.get("tool_use_id"), str):
            self._task_started(rec, now_ns)
        elif subtype == "task_notification" and isinstance(rec.get("tool_use_id"), str):
            done = self._agents.get(rec["tool_use_id"])
            if done is not None:
                done.status = rec.get("status") if isinstance(rec.get("status"), str) else done.status
                self._end_agent(done, now_ns)
                self._maybe_emit_turns(now_ns)

    def _api_retry(self, rec: dict[str, Any], now_ns: int) -> None:
        status, error = rec.get("error_status"), rec.get("error")
        self._count("ccotel_relay_api_retries",
                    (_label(status if status is not None else "none"), _label(error or "unknown")), 1.0)
        if self._segment_resolved and self._turn is not None:
            self._turn.retries.append((now_ns, rec))
        else:
            self._pending_retries.append((now_ns, rec))  # the round's turn is not known yet

    def _task_started(self, rec: dict[str, Any], now_ns: int) -> None:
        agent = self._agent_for(rec["tool_use_id"], rec, now_ns)
        if isinstance(rec.get("subagent_type"), str):
            agent.agent_type = rec["subagent_type"]
        if isinstance(rec.get("description"), str):
            agent.description = rec["description"]
        depth = rec.get("spawn_depth")
        if isinstance(depth, int) and not isinstance(depth, bool):
            agent.spawn_depth = depth
        if rec.get("is_backgrounded") is True:
            agent.background = True

    def _result(self, rec: dict[str, Any], now_ns: int) -> None:
        waiting = next((t for t in self._open_turns if not t.results), None)  # results come in query order
        if waiting is not None and waiting is not self._turn:
            turn = waiting  # an earlier query's result, printed after a later query began (s04)
        elif self._turn is not None and not self._segment_resolved and self._round_uuid is None:
            turn = self._turn  # a result with no line of its own
        else:
            turn = self._turn_or_round(rec, now_ns)
        self._end_call(self._context(_MAIN))
        turn.results.append(rec)
        turn.last_ns = max(turn.last_ns, now_ns)
        self._count_result(rec)
        self._segment_resolved = False  # the next main-agent record starts another round
        self._maybe_emit_turns(now_ns)

    # -- finishing ---------------------------------------------------------------------------

    def _end_call(self, ctx: _Context) -> None:
        call, ctx.call = ctx.call, None
        if call is not None:
            self._out.append(_chat_span(call, self))

    def _end_tool(self, tool: _Tool, now_ns: int, error: str | None) -> None:
        if self._tools.pop(tool.tool_use_id, None) is None:
            return
        self._out.append(_tool_span(tool, self, now_ns, error))

    def _end_agent(self, agent: _Agent, now_ns: int) -> None:
        if agent.done:
            return
        agent.done = True
        self._end_call(self._context(agent.tool_use_id))
        agent.last_ns = max(agent.last_ns, now_ns)
        self._out.append(_agent_span(agent, self))

    def _maybe_emit_turns(self, now_ns: int) -> None:
        """A turn is done once it has a result and none of its agents still runs; its span goes
        out ``grace_ns`` later (``tick``), at the next prompt or at the end of the stream: a
        background agent's notification can add another round, and result, to it."""
        for turn in self._open_turns:
            if turn is self._turn and self._segment_resolved:
                turn.ready_ns = None  # a round of it runs
            elif turn.results and not any(a.turn is turn and not a.done for a in self._agents.values()):
                turn.ready_ns = now_ns

    def tick(self, now_ns: int) -> None:
        """Send the spans of turns done for ``grace_ns``."""
        for turn in list(self._open_turns):
            if turn.ready_ns is not None and now_ns - turn.ready_ns >= self.grace_ns:
                self._emit_turn(turn, now_ns)

    def _emit_turn(self, turn: _Turn, now_ns: int) -> None:
        if turn.emitted:
            return
        turn.emitted = True
        if turn in self._open_turns:
            self._open_turns.remove(turn)
        self._out.append(_turn_span(turn, self))

    def _count_result(self, rec: dict[str, Any]) -> None:
        self._count("ccotel_relay_results", (_label(rec.get("subtype") or "unknown"),
                                             "true" if rec.get("is_error") is True else "false",
                                             _label(rec.get("terminal_reason") or "none")), 1.0)
        for denial in rec.get("permission_denials") or []:
            tool = denial.get("tool_name") if isinstance(denial, dict) else None
            self._count("ccotel_relay_permission_denials", (_label(tool or "unknown"),), 1.0)
        usage = rec.get("modelUsage")
        if not isinstance(usage, dict):
            return
        for model, figures in usage.items():
            if not isinstance(figures, dict):
                continue
            for kind, name in _MODEL_USAGE_FIELDS:
                self._count_delta("ccotel_relay_tokens", str(model), kind, figures.get(name))
            self._count_delta("ccotel_relay_cost_usd", str(model), None, figures.get("costUSD"))

    def _count_delta(self, metric: str, model: str, kind: str | None, value: object) -> None:
        """modelUsage is the process's running total: count what grew since the last result."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        k = (model, kind or metric)
        delta = float(value) - self._model_usage.get(k, 0.0)
        self._model_usage[k] = max(float(value), self._model_usage.get(k, 0.0))
        if delta > 0:
            labels = (_label(model), kind) if kind else (_label(model),)
            self._count(metric, labels, delta)


_MODEL_USAGE_FIELDS = (("input", "inputTokens"), ("output", "outputTokens"),
                       ("cache_read", "cacheReadInputTokens"), ("cache_creation", "cacheCreationInputTokens"))


def _uuid(rec: dict[str, Any]) -> str | None:
    uuid = rec.get("uuid")
    return uuid if isinstance(uuid, str) and uuid else None


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _label(value: object) -> str:
    return str(value)[:_LABEL_MAX]


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


# -- spans -------------------------------------------------------------------------------------


def _common(a: StreamAssembler) -> dict[str, Any]:
    attrs: dict[str, Any] = {GEN_AI_CONVERSATION_ID: a.session_id, SESSION_ID: a.session_id,
                             CCOTEL_SOURCE: "stream"}
    if a.version:
        attrs[CLAUDE_CODE_VERSION] = a.version
    if a.cwd:
        attrs[CLAUDE_CODE_CWD] = a.cwd
    return attrs


def _chat_span(c: _Call, a: StreamAssembler) -> SpanRecord:
    model = rules.reported_model(c.model)
    attrs = _common(a)
    attrs.update({
        GEN_AI_OPERATION_NAME: "chat",
        GEN_AI_PROVIDER_NAME: "anthropic",
        GEN_AI_RESPONSE_ID: c.message_id,
        CLAUDE_CODE_IS_SIDECHAIN: c.is_sidechain,
        CLAUDE_CODE_MESSAGE_LINES: c.blocks,
    })
    if model:
        attrs[GEN_AI_REQUEST_MODEL] = model
        attrs[GEN_AI_RESPONSE_MODEL] = model
    if c.first_uuid:
        attrs[CLAUDE_CODE_UUID] = c.first_uuid
    if c.request_id:
        attrs[CLAUDE_CODE_REQUEST_ID] = c.request_id
    if c.agent_id:
        attrs[CLAUDE_CODE_AGENT_ID] = c.agent_id
    if c.stop_reason:
        attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (c.stop_reason,)
    if c.usage is not None and not c.is_api_error:
        _usage_attrs(attrs, c.usage, final=c.stop_reason is not None)
    status, message = StatusCode.UNSET, None
    if c.is_api_error:
        status, message = StatusCode.ERROR, c.error_text or "api_error"
        attrs[ERROR_TYPE] = rules.api_error_type(c.error_text)
    return SpanRecord(
        trace_id=c.turn.trace_id, span_id=ids.span_id("chat", c.key), parent_span_id=c.parent_span_id,
        name=f"chat {model}" if model else "chat", kind=SpanKind.CLIENT, start_ns=c.start_ns,
        end_ns=max(c.end_ns, c.start_ns), attributes=attrs, status=status, status_message=message,
    )


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _usage_attrs(attrs: dict[str, Any], u: dict[str, Any], final: bool) -> None:
    """The input side of a stream record's usage is final (message_start); its output_tokens is
    the placeholder of the first snapshot until a stop_reason is there: not exported then."""
    fresh, read, write = _int(u.get("input_tokens")), _int(u.get("cache_read_input_tokens")), \
        _int(u.get("cache_creation_input_tokens"))
    attrs[GEN_AI_USAGE_INPUT_TOKENS] = fresh + read + write
    attrs[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = read
    attrs[GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] = write
    attrs[CLAUDE_CODE_USAGE_INPUT_TOKENS] = fresh
    if final:
        attrs[GEN_AI_USAGE_OUTPUT_TOKENS] = _int(u.get("output_tokens"))
    else:
        attrs[CCOTEL_RELAY_OUTPUT_TOKENS_FINAL] = False



def _tool_span(t: _Tool, a: StreamAssembler, end_ns: int, error: str | None) -> SpanRecord:
    attrs = _common(a)
    attrs.update({
        GEN_AI_OPERATION_NAME: "execute_tool",
        GEN_AI_TOOL_NAME: t.name,
        GEN_AI_TOOL_CALL_ID: t.tool_use_id,
        GEN_AI_TOOL_TYPE: "function",
    })
    agent = a._agents.get(t.tool_use_id)  # noqa: SLF001  (the assembler's own records)
    if agent is not None and agent.agent_id:
        attrs[CLAUDE_CODE_TOOL_AGENT_ID] = agent.agent_id
    if t.background:
        attrs[CLAUDE_CODE_TOOL_BACKGROUND] = True
    if error:
        attrs[ERROR_TYPE] = error
    return SpanRecord(
        trace_id=t.turn.trace_id, span_id=ids.span_id("tool", a.session_id, t.tool_use_id),
        parent_span_id=ids.span_id("chat", t.call_key), name=f"execute_tool {t.name}", kind=SpanKind.INTERNAL,
        start_ns=t.start_ns, end_ns=max(end_ns, t.start_ns), attributes=attrs,
        status=StatusCode.ERROR if error else StatusCode.UNSET, status_message=error,
    )


def _agent_span(ag: _Agent, a: StreamAssembler) -> SpanRecord:
    agent_type = ag.agent_type or "subagent"
    attrs = _common(a)
    attrs.update({
        GEN_AI_OPERATION_NAME: "invoke_agent",
        GEN_AI_AGENT_NAME: agent_type,
        CLAUDE_CODE_AGENT_BACKGROUND: ag.background,
        CLAUDE_CODE_TURN_API_CALLS: ag.calls,
        CLAUDE_CODE_TURN_TOOL_CALLS: ag.tool_calls,
        CLAUDE_CODE_IS_SIDECHAIN: True,
        GEN_AI_TOOL_CALL_ID: ag.tool_use_id,
    })
    if ag.agent_id:
        attrs[CLAUDE_CODE_AGENT_ID] = ag.agent_id
    if ag.description:
        attrs[GEN_AI_AGENT_DESCRIPTION] = ag.description
    if ag.spawn_depth is not None:
        attrs[CLAUDE_CODE_AGENT_SPAWN_DEPTH] = ag.spawn_depth
    if ag.status:
        attrs[CCOTEL_AGENT_STATUS] = ag.status
    failed = ag.status in ("failed", "killed", "stopped")
    return SpanRecord(
        trace_id=ag.turn.trace_id, span_id=ag.span_id(a.session_id),
        parent_span_id=ids.span_id("tool", a.session_id, ag.tool_use_id), name=f"invoke_agent {agent_type}",
        kind=SpanKind.INTERNAL, start_ns=ag.start_ns, end_ns=max(ag.last_ns, ag.start_ns), attributes=attrs,
        status=StatusCode.ERROR if failed else StatusCode.UNSET, status_message=ag.status if failed else None,
    )


def _turn_span(t: _Turn, a: StreamAssembler) -> SpanRecord:
    attrs = _common(a)
    attrs.update({
        GEN_AI_OPERATION_NAME: "invoke_agent",
        GEN_AI_AGENT_NAME: "claude-code",
        CLAUDE_CODE_TURN_API_CALLS: t.calls,
        CLAUDE_CODE_TURN_TOOL_CALLS: t.tool_calls,
        CCOTEL_RELAY_LINKED: t.linked,
    })
    if t.linked:
        attrs[CLAUDE_CODE_UUID] = t.key
    if t.results:
        attrs.update(result_attributes(t.results[-1]))
        if len(t.results) > 1:
            attrs[CCOTEL_RESULT_COUNT] = len(t.results)
    if t.retries:
        attrs[CCOTEL_TURN_API_RETRIES] = len(t.retries)
    events = tuple(SpanEvent(CCOTEL_API_RETRY, ts, _retry_attributes(r)) for ts, r in t.retries)
    last = t.results[-1] if t.results else {}
    error = last.get("is_error") is True
    return SpanRecord(
        trace_id=t.trace_id, span_id=t.span_id, parent_span_id=None, name="invoke_agent claude-code",
        kind=SpanKind.INTERNAL, start_ns=t.start_ns, end_ns=max(t.last_ns, t.start_ns), attributes=attrs,
        status=StatusCode.ERROR if error else StatusCode.UNSET,
        status_message=str(last.get("terminal_reason") or last.get("subtype")) if error else None, events=events,
    )


_RESULT_SCALARS = (("subtype", str), ("is_error", bool), ("num_turns", int), ("duration_ms", int),
                   ("duration_api_ms", int), ("total_cost_usd", float), ("terminal_reason", str),
                   ("stop_reason", str), ("api_error_status", int))


def result_attributes(r: dict[str, Any]) -> dict[str, Any]:
    """A ``result`` record as ``ccotel.result.*`` attributes (no GenAI convention covers them;
    usage goes under ccotel.result too: gen_ai.usage.* on the turn span would count the chat
    spans' tokens twice in backends that add them up)."""
    out: dict[str, Any] = {}
    for name, typ in _RESULT_SCALARS:
        v = r.get(name)
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, typ) and (typ is bool or not isinstance(v, bool)):
            out[f"{CCOTEL_RESULT_PREFIX}{name}"] = v
    usage = r.get("usage")
    if isinstance(usage, dict):
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            out[f"{CCOTEL_RESULT_USAGE_PREFIX}{key}"] = _int(usage.get(key))
    models = r.get("modelUsage")
    if isinstance(models, dict) and models:
        names = sorted(str(m) for m in models)
        out[CCOTEL_RESULT_MODEL_USAGE_MODELS] = tuple(names)
        for attr, key in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
                          ("cache_read_input_tokens", "cacheReadInputTokens"),
                          ("cache_creation_input_tokens", "cacheCreationInputTokens")):
            out[f"{CCOTEL_RESULT_MODEL_USAGE_PREFIX}{attr}"] = tuple(_int(_fig(models, m).get(key)) for m in names)
        out[CCOTEL_RESULT_MODEL_USAGE_COST_USD] = tuple(float(_fig(models, m).get("costUSD") or 0.0)
                                                          for m in names)
    denials = r.get("permission_denials")
    if isinstance(denials, list):
        out[CCOTEL_RESULT_PERMISSION_DENIALS] = len(denials)
        tools = [str(d.get("tool_name")) for d in denials if isinstance(d, dict) and d.get("tool_name")]
        if tools:
            out[CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS] = tuple(tools)  # their inputs may hold secrets
    return out


def _fig(models: dict[str, Any], name: str) -> dict[str, Any]:
    v = models.get(name)
    return v if isinstance(v, dict) else {}


def _retry_attributes(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("attempt", "max_retries", "retry_delay_ms", "error_status"):
        if isinstance(r.get(key), int) and not isinstance(r.get(key), bool):
            out[f"{CCOTEL_API_RETRY_PREFIX}{key}"] = r[key]
    if isinstance(r.get("error"), str):
        out[CCOTEL_API_RETRY_ERROR] = r["error"]
    return out
