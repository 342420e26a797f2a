"""Where a line goes in a session's tree: the turn a prompt starts, the subagent a line of a
subagent file or of an inline sidechain belongs to, and the tool call each subagent hangs under.

A subagent is linked to its spawning Task/Agent tool call by meta.json's toolUseId,
toolUseResult.agentId, an agent_progress line or its prompt text, whichever comes first; once that
tool's owner has a trace, so has the agent (``resolve_agents``). Agents never linked go under the
turn running when they started, or into a trace of their own (``resolve_leftover_agents``).
"""

from __future__ import annotations

from ccotel.assemble import ids
from ccotel.assemble.closing import close
from ccotel.assemble.digests import Digests, digest64
from ccotel.assemble.model import AgentRun, Owner, Session, Turn, TurnOutcome
from ccotel.assemble.outbox import Outbox
from ccotel.records import Entry, FileKind, TranscriptFile

__all__ = ["agent", "agent_owner", "link_agent", "resolve_agents", "resolve_leftover_agents", "set_agent_tool",
           "start_turn"]


def start_turn(sess: Session, e: Entry, kind: str | None, out: Outbox, new_owners: list[Owner], active: set[str],
               seen_prompts: Digests, capture_content: bool) -> Turn:
    """A new turn, the session's current one; the turn before it closes. Its prompt goes into
    ``seen_prompts``: a copy of it in another file starts no turn."""
    prev = sess.current_turn
    if prev is not None and not prev.closed:
        # A new prompt supersedes the turn: a tool call still without result is a dead branch.
        close(sess, prev, TurnOutcome.ORPHANED if prev.open_tools else TurnOutcome.COMPLETED, out)
    lost, sess.unrepaired = len(sess.unrepaired), {}
    ts = e.timestamp_ns or 0
    uuid = e.uuid or ""
    trace = ids.trace_id(sess.session_id, uuid)
    turn = Turn(
        session_id=sess.session_id, key=uuid, start_ns=ts, last_ns=ts,
        span_id=ids.span_id("turn", sess.session_id, uuid), trace_id=trace,
        prompt_uuid=uuid, trigger=kind or "continuation", lost_tools=lost,
    )
    if capture_content and e.type == "user":
        turn.prompt_text = next((b.text for b in e.blocks if b.type == "text"), None)
    seen_prompts.add(digest64(uuid))
    new_owners.append(turn)
    sess.current_turn = turn
    sess.open_owners.append(turn)
    active.add(sess.session_id)
    sess.turn_index.append((ts, trace, turn.span_id))
    return turn


def agent_owner(sess: Session, e: Entry, src: TranscriptFile, out: Outbox, new_owners: list[Owner],
                active: set[str]) -> Owner | None:
    """The owner of a line of a subagent file, or of a sidechain line of a main file."""
    if src.kind is not FileKind.MAIN:
        agent_id = src.agent_id or e.agent_id or "unknown"
        return agent(sess, agent_id, agent_id, e, out, new_owners, active)
    # 1.0.x inline sidechain: a root (no parent) starts an agent, the rest follow the tree.
    found = sess.owner_of.get(e.parent_uuid) if e.parent_uuid else None
    if found is not None:
        owner = found[0]
        if owner.closed and isinstance(owner, AgentRun):
            owner.closed = False
            sess.open_owners.append(owner)
            active.add(sess.session_id)
        return owner
    run = agent(sess, e.agent_id or e.uuid or "unknown", e.agent_id, e, out, new_owners, active)
    if e.type == "user" and e.blocks and e.blocks[0].type == "text" and run.tool_use_id is None:
        run.prompt_key = e.blocks[0].id
        _link_by_prompt(sess, run, out)
    return run


def agent(sess: Session, key: str, agent_id: str | None, e: Entry | None, out: Outbox, new_owners: list[Owner],
          active: set[str]) -> AgentRun:
    """The session's agent ``key``, created at its first mention; a line (``e``) opens it."""
    run = sess.agents.get(key)
    ts = e.timestamp_ns if e is not None and e.timestamp_ns is not None else 0
    if run is None:
        run = AgentRun(
            session_id=sess.session_id, key=key, start_ns=ts, last_ns=ts,
            span_id=ids.span_id("agent", sess.session_id, key), agent_id=agent_id,
        )
        sess.agents[key] = run
        new_owners.append(run)
        if agent_id and agent_id in sess.agent_links:
            tool_use_id, how = sess.agent_links[agent_id]
            set_agent_tool(sess, run, tool_use_id, how, out)
    if e is not None:
        if run.start_ns == 0 or (ts and ts < run.start_ns):
            run.start_ns = ts
        if run.closed:
            run.closed = False  # late lines of a closed agent: same span ids, new children
        if run not in sess.open_owners:
            sess.open_owners.append(run)
            active.add(sess.session_id)
    return run


def link_agent(sess: Session, agent_id: str, tool_use_id: str, how: str, out: Outbox,
               unseen: dict[tuple[str, str], int], named_ns: int = 0) -> None:
    """The agent was spawned by this tool call (``how``: meta | result | progress). With
    ``named_ns``, an agent with no line yet is awaited in ``unseen`` from then on."""
    if named_ns:
        run = sess.agents.get(agent_id)
        if (run is None or not run.first_offsets) and (sess.session_id, agent_id) not in unseen:
            unseen[(sess.session_id, agent_id)] = named_ns
    if agent_id in sess.agent_links:
        return
    sess.agent_links[agent_id] = (tool_use_id, how)
    run = sess.agents.get(agent_id)
    if run is not None and run.tool_use_id is None:
        set_agent_tool(sess, run, tool_use_id, how, out)


def set_agent_tool(sess: Session, run: AgentRun, tool_use_id: str, how: str, out: Outbox) -> None:
    run.tool_use_id = tool_use_id
    run.link = how
    task = sess.task_tools.get(tool_use_id)
    if task is not None:
        task.agent_key = run.key
        if run not in task.owner.children:
            task.owner.children.append(run)
            run.parent = task.owner
        run.background = run.background or task.background
        run.agent_type = run.agent_type or task.subagent_type
    resolve_agents(sess, out)


def _link_by_prompt(sess: Session, run: AgentRun, out: Outbox) -> None:
    for task in sess.task_tools.values():
        if task.agent_key is None and task.prompt_key and task.prompt_key == run.prompt_key:
            task.agent_key = run.key
            set_agent_tool(sess, run, task.tool_use_id, "prompt", out)
            return


def resolve_agents(sess: Session, out: Outbox) -> None:
    """Give every agent whose spawning tool is known a trace; repeat for nested agents."""
    progress = True
    while progress:
        progress = False
        for run in sess.agents.values():
            if run.trace_id is not None or run.tool_use_id is None:
                continue
            task = sess.task_tools.get(run.tool_use_id)
            if task is None or task.owner.trace_id is None:
                continue
            out.set_context(run, task.owner.trace_id, task.span_id)
            progress = True


def resolve_leftover_agents(sess: Session, out: Outbox) -> None:
    """Agents whose spawning tool never appeared: under the turn running when they started,
    or in a trace of their own (a subagent file whose parent file is gone)."""
    runs = sorted(sess.agents.values(), key=lambda a: a.start_ns)
    for cycle_pass in (False, True):
        for run in runs:
            if run.trace_id is not None:
                continue
            resolve_agents(sess, out)
            if run.trace_id is not None:
                continue
            if not cycle_pass and run.tool_use_id is not None and run.tool_use_id in sess.task_tools:
                continue  # its parent agent resolves first, unless they spawn each other (a cycle)
            _resolve_by_time(sess, run, out)


def _resolve_by_time(sess: Session, run: AgentRun, out: Outbox) -> None:
    turn = None
    for start, trace, root in sess.turn_index:
        if start <= run.start_ns:
            turn = (trace, root)
    if turn is not None:
        run.link = run.link or "time"
        out.set_context(run, turn[0], turn[1])
    else:
        run.link = run.link or "none"
        out.set_context(run, ids.trace_id(sess.session_id, "agent", run.key), None)
    resolve_agents(sess, out)
