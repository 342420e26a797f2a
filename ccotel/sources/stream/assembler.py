"""Stream records -> the turns, API calls, tool calls and subagents they make (state.py), with
the transcript path's ids, handed to spans.py as each finishes; and the relay's counters.

The stream has no line per finished thing: a call ends when its context's next call starts, a
tool when its result comes, a subagent at its notification or its result, a turn once it has a
result and no subagent of it still runs (``grace_ns`` later: another round may follow).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccotel.records import SpanRecord
from ccotel.rules import transcript as rules
from ccotel.sources.stream.lines import BlockDedupe, Counter
from ccotel.sources.stream.spans import Origin, agent_span, chat_span, tool_span, turn_span
from ccotel.sources.stream.state import Agent, Call, ToolUse, Turn

__all__ = ["PromptResolver", "StreamAssembler"]

#: ``resolve_prompt(session_id, uuid)``: the uuid of the prompt line whose turn holds ``uuid``.
PromptResolver = Callable[[str, str], str | None]

_MAIN = ""  # the context key of the main agent (subagents: their parent_tool_use_id)
_LABEL_MAX = 64


@dataclass
class _Context:
    """One agent's thread on the stream: the main agent or a subagent (by parent_tool_use_id)."""

    last_ns: int = 0
    call: Call | None = None


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
        self._turn: Turn | None = None  # the turn of the current round (until its result)
        self._open_turns: list[Turn] = []  # turns whose span is not out yet
        self._segment_resolved = False  # the current round's turn is known
        self._round_uuid: str | None = None  # the round's last main-agent line before its first answer
        self._round_start_ns = 0
        self._pending_retries: list[tuple[int, dict[str, Any]]] = []  # before the round's turn is known
        self._contexts: dict[str, _Context] = {}
        self._tools: dict[str, ToolUse] = {}
        self._agents: dict[str, Agent] = {}  # by the tool_use id that spawned them
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

    def _turn_for(self, ctx_key: str, rec: dict[str, Any], now_ns: int) -> Turn:
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
            turn = Turn(self.session_id, key, linked, self._round_start_ns or now_ns, now_ns)
            self._open_turns.append(turn)
        self._turn = turn
        self._segment_resolved = True
        self._round_uuid, self._round_start_ns = None, 0
        turn.retries.extend(self._pending_retries)
        self._pending_retries = []

    def _agent_for(self, tool_use_id: str, rec: dict[str, Any] | None, now_ns: int) -> Agent:
        agent = self._agents.get(tool_use_id)
        if agent is None:
            tool = self._tools.get(tool_use_id)
            turn = tool.turn if tool is not None else self._turn_or_round(rec, now_ns)
            agent = self._agents[tool_use_id] = Agent(tool_use_id, turn, now_ns, now_ns)
            agent.background = tool.background if tool is not None else False
        if rec is not None:
            agent_id = rec.get("agent_id") or rec.get("task_id")
            if isinstance(agent_id, str) and agent_id and agent.agent_id is None:
                agent.agent_id = agent_id
            agent.last_ns = max(agent.last_ns, now_ns)
        return agent

    def _turn_or_round(self, rec: dict[str, Any] | None, now_ns: int) -> Turn:
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

    def _new_call(self, ctx_key: str, ctx: _Context, turn: Turn, key: str, message_id: str,
                  request_id: str | None, rec: dict[str, Any], now_ns: int) -> Call:
        if ctx_key == _MAIN:
            parent, agent_id = turn.span_id, None
            turn.calls += 1
        else:
            agent = self._agent_for(ctx_key, rec, now_ns)
            parent, agent_id = agent.span_id(self.session_id), agent.agent_id
            agent.calls += 1
        start = ctx.last_ns or (turn.start_ns if ctx_key == _MAIN else now_ns)
        uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
        return Call(key=key, message_id=message_id, request_id=request_id, turn=turn, parent_span_id=parent,
                     start_ns=min(start, now_ns), end_ns=now_ns, first_uuid=uuid, model=None, agent_id=agent_id,
                     is_sidechain=ctx_key != _MAIN)

    def _tool_use(self, ctx_key: str, call: Call, block: dict[str, Any], now_ns: int) -> None:
        tool_id = str(block["id"])
        if tool_id in self._tools:
            return
        name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
        info = _dict(block.get("input"))
        tool = ToolUse(tool_id, str(name), call.key, call.turn, now_ns,
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
            self._out.append(chat_span(call, self._origin()))

    def _end_tool(self, tool: ToolUse, now_ns: int, error: str | None) -> None:
        if self._tools.pop(tool.tool_use_id, None) is None:
            return
        agent = self._agents.get(tool.tool_use_id)
        agent_id = agent.agent_id if agent is not None else None
        self._out.append(tool_span(tool, self._origin(), agent_id, now_ns, error))

    def _end_agent(self, agent: Agent, now_ns: int) -> None:
        if agent.done:
            return
        agent.done = True
        self._end_call(self._context(agent.tool_use_id))
        agent.last_ns = max(agent.last_ns, now_ns)
        self._out.append(agent_span(agent, self._origin()))

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

    def _emit_turn(self, turn: Turn, now_ns: int) -> None:
        if turn.emitted:
            return
        turn.emitted = True
        if turn in self._open_turns:
            self._open_turns.remove(turn)
        self._out.append(turn_span(turn, self._origin()))

    def _origin(self) -> Origin:
        return Origin(self.session_id, self.version, self.cwd)

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

