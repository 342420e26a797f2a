"""Tool calls: a tool_use block opens one, its tool_result closes it with its outcome (a result,
an error, interrupted, rejected, or repaired by a resumed process). A Task/Agent tool call is also
where a subagent hangs: it is remembered (TaskTool) and linked to its agent (placement.py).
"""

from __future__ import annotations

from ccotel.assemble import ids
from ccotel.assemble.model import Call, Owner, Session, TaskTool, ToolCall, ToolError
from ccotel.assemble.outbox import Outbox
from ccotel.assemble.placement import link_agent, resolve_agents, set_agent_tool
from ccotel.read.parse_full import text_key
from ccotel.records import Entry
from ccotel.rules import transcript as rules

__all__ = ["close_tools", "is_repair", "open_tools"]

_TASK_TOOLS = rules.TASK_TOOLS
_INTERRUPT_PREFIX = rules.INTERRUPT_PREFIX


def open_tools(sess: Session, owner: Owner, call: Call, e: Entry, ts: int, out: Outbox, capture_content: bool) -> None:
    """The tool calls of a response's line."""
    for b in e.blocks:
        if b.type == "tool_use" and b.id and b.id not in sess.traced_tools:
            sess.traced_tools.add(b.id)  # a tool_use written twice (re-read, replay) is traced once
            _open_tool(sess, owner, call, b.id, sess.strings[b.name or "unknown"], b.input, ts, out, capture_content)


def _open_tool(sess: Session, owner: Owner, call: Call, tool_id: str, name: str, tool_input: object, ts: int,
               out: Outbox, capture_content: bool) -> None:
    tool = ToolCall(tool_use_id=tool_id, name=name, call_key=call.key, start_ns=ts, owner=owner)
    if capture_content:
        tool.input = tool_input
    call.tool_ids.append(tool_id)
    owner.tool_calls += 1
    owner.open_tools[tool_id] = tool
    sess.open_tools[tool_id] = tool
    if name in _TASK_TOOLS:
        info = tool_input if isinstance(tool_input, dict) else {}
        background = info.get("run_in_background") is True
        tool.background = background
        prompt = info.get("prompt")
        prompt_key = info.get("prompt_key") or (text_key(prompt) if isinstance(prompt, str) else None)
        sess.task_tools[tool_id] = TaskTool(
            tool_id, owner, ids.span_id("tool", sess.session_id, tool_id),
            info.get("subagent_type") if isinstance(info.get("subagent_type"), str) else None,
            prompt_key, background,
        )
        for agent_id, (tuid, how) in list(sess.agent_links.items()):
            if tuid == tool_id and agent_id in sess.agents:
                set_agent_tool(sess, sess.agents[agent_id], tool_id, how, out)
        resolve_agents(sess, out)


def close_tools(sess: Session, owner: Owner, e: Entry, ts: int, out: Outbox, unseen: dict[tuple[str, str], int],
                capture_content: bool) -> int:
    """The tool calls a tool_result line answers; returns how many results answer no open call."""
    unmatched = 0
    for b in e.blocks:
        if b.type != "tool_result" or b.id is None:
            continue
        tool = sess.open_tools.pop(b.id, None)
        if tool is None:
            unmatched += 1
            continue
        tool.end_ns = ts
        text = b.text or ""
        if rules.is_repair_text(text):
            tool.is_error, tool.error_type, tool.repaired = True, ToolError.INTERRUPTED, True
            (tool.owner or owner).orphaned_tools += 1
        elif text.startswith(_INTERRUPT_PREFIX) or (e.tool_use_result or {}).get("interrupted") is True:
            tool.is_error, tool.error_type = True, ToolError.INTERRUPTED
        elif e.tool_use_result_error == "User rejected tool use":
            tool.is_error, tool.error_type = True, ToolError.REJECTED
        elif b.is_error:
            tool.is_error, tool.error_type = True, ToolError.TOOL_ERROR
        if capture_content:
            tool.result_text = b.text
        result = e.tool_use_result or {}
        agent_id = result.get("agentId")
        if isinstance(agent_id, str) and tool.name in _TASK_TOOLS:
            tool.agent_id = agent_id
            link_agent(sess, agent_id, tool.tool_use_id, "result", out, unseen, ts)
        tool_owner = tool.owner or owner
        tool_owner.open_tools.pop(tool.tool_use_id, None)
        out.emit(tool_owner, tool)
    return unmatched


def is_repair(e: Entry) -> bool:
    """A tool_result line written by a resumed 2.1.3xx process for a call its killed process left."""
    return any(b.type == "tool_result" and rules.is_repair_text(b.text) for b in e.blocks)
