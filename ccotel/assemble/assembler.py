"""Assemble stage: Entries of a session's files -> finished turns, API calls, tool calls and subagent runs.

Pure: no I/O and no clocks (callers pass ``now_ns``). Everything a span needs is decided here;
spans.py only formats it.

The model, per session:
- A Turn starts at a human prompt on the main chain (DESIGN.md section 2). Every later line
  belongs to the owner of its parent line (the parentUuid tree), so a dead branch left by a
  killed process stays in the turn it was written in.
- An AgentRun is a subagent: a subagent file (2.0.x flat, 2.1.x subagents/) or an inline
  sidechain of 1.0.x. It hangs under the Task/Agent tool call that spawned it, found through
  meta.json's toolUseId, toolUseResult.agentId, agent_progress lines, or the prompt text.
- A Call is one API response (message.id + requestId) written as one line per content block;
  usage is taken once, from the line with the largest output (the final snapshot).
- A ToolCall pairs a tool_use block with its tool_result.

Items are handed out (``drain``) once finished and once their trace is known: a subagent's
lines can be read before the main file says which tool spawned it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ccotel.assemble import ids
from ccotel.assemble.digests import Digests, digest64
from ccotel.read.parse_full import text_key
from ccotel.records import AdvisorCall, Entry, FileKind, TranscriptFile, Usage
from ccotel.rules import transcript as rules

__all__ = [
    "AgentRun",
    "Assembler",
    "Call",
    "Finished",
    "Timeouts",
    "ToolCall",
    "Turn",
    "classify_user",
]

_TASK_TOOLS = rules.TASK_TOOLS
_FINAL_STOP = rules.FINAL_STOP
_INTERRUPT_PREFIX = rules.INTERRUPT_PREFIX
classify_user = rules.classify_user


@dataclass(frozen=True)
class Timeouts:
    # A final answer (stop_reason end_turn) ends its turn after this much quiet.
    quiet_ns: int = 1_000_000_000
    # A turn with no open tool call and no final stop_reason (older versions never write one).
    idle_ns: int = 60_000_000_000
    # A tool call with no result for this long is orphaned (DESIGN: --stall-timeout, 180 s).
    stall_ns: int = 180_000_000_000


@dataclass(eq=False)
class ToolCall:
    tool_use_id: str
    name: str
    call_key: str
    start_ns: int
    end_ns: int | None = None
    is_error: bool = False
    error_type: str | None = None  # tool_error | interrupted | rejected | orphaned
    input: object = None
    result_text: str | None = None
    agent_id: str | None = None
    background: bool = False
    repaired: bool = False  # a resumed 2.1.3xx process wrote its result: the process died during the call
    owner: Owner | None = None


@dataclass(eq=False)
class Call:
    key: str
    message_id: str
    request_id: str | None
    start_ns: int
    end_ns: int
    first_uuid: str | None
    parent_uuid: str | None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    version: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    is_sidechain: bool = False
    agent_id: str | None = None
    is_api_error: bool = False
    error_text: str | None = None
    tool_ids: list[str] = field(default_factory=list)
    lines: int = 0
    owner: Owner | None = None
    advisors: tuple[AdvisorCall, ...] = ()
    requested_model: str | None = None
    effort: str | None = None
    sent_ns: int | None = None  # its api-request line (2.1.3xx): when the request was sent
    first_line_ns: int = 0


@dataclass(eq=False)
class _OwnerBase:
    session_id: str
    key: str
    start_ns: int
    last_ns: int
    span_id: int = 0
    trace_id: int | None = None  # None until the trace is known (subagents)
    parent_span_id: int | None = None
    current: Call | None = None
    superseded: Call | None = None  # the response before current, held open for stray lines
    held: list[Call] = field(default_factory=list)  # early copies kept until the owner closes (rules.py)
    open_tools: dict[str, ToolCall] = field(default_factory=dict)
    final_seen: bool = False
    closed: bool = False
    last_arrival_ns: int = 0
    uuids: list[str] = field(default_factory=list)
    waiting: list[Finished] = field(default_factory=list)  # finished before the trace was known
    version: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    entrypoint: str | None = None
    calls: int = 0
    tool_calls: int = 0
    interrupted: bool = False
    api_errors: int = 0
    api_retries: int = 0
    compactions: list[tuple[int, str | None, int | None]] = field(default_factory=list)
    # Delivery bookkeeping (pipeline.py): where the owner's lines start in each file, its API
    # calls, subagents spawned from its tool calls, spans sent but not yet acknowledged.
    first_offsets: dict[str, int] = field(default_factory=dict)
    call_keys: list[str] = field(default_factory=list)
    children: list[AgentRun] = field(default_factory=list)
    parent: Turn | AgentRun | None = None  # the owner of the tool call that spawned this subagent
    pending: int = 0
    stalled: bool = False
    # The last line was a prompt or a tool result, or a line of a response with more to come
    # (rules.response_continues): the model owes a line.
    awaiting_model: bool = False
    live: bool = False  # started while ccotel ran (not history read on a first start): counted in metrics
    orphaned_tools: int = 0
    killed: bool = False  # a repair line says its process died (2.1.3xx resume)
    unsent: bool = False  # some of its spans did not fit the trace queue: read again later (pipeline.py)

    @property
    def token(self) -> str:
        return f"{self.session_id}/{self.key}"


@dataclass(eq=False)
class Turn(_OwnerBase):
    prompt_uuid: str | None = None
    trigger: str = "prompt"  # prompt | command | notification | continuation
    prompt_text: str | None = None
    outcome: str | None = None  # completed | interrupted | orphaned | killed | incomplete
    # orphaned tool calls of earlier turns this turn's conversation does not know (a dead branch)
    lost_tools: int = 0


@dataclass(eq=False)
class AgentRun(_OwnerBase):
    agent_id: str | None = None  # None for 1.0.x inline sidechains
    agent_type: str | None = None
    description: str | None = None
    tool_use_id: str | None = None
    link: str | None = None  # meta | result | progress | prompt | time | none
    spawn_depth: int | None = None
    background: bool = False
    prompt_key: str | None = None
    span_emitted: bool = False


Owner = Turn | AgentRun


@dataclass(frozen=True)
class Finished:
    """A finished item whose trace is known; spans.py turns it into a span."""

    item: Turn | AgentRun | Call | ToolCall
    trace_id: int
    parent_span_id: int | None


@dataclass
class _TaskTool:
    tool_use_id: str
    owner: Owner
    span_id: int
    subagent_type: str | None
    prompt_key: str | None
    background: bool
    agent_key: str | None = None


@dataclass
class _Session:
    session_id: str
    current_turn: Turn | None = None
    owner_of: dict[str, tuple[Owner, int]] = field(default_factory=dict)  # uuid -> (owner, ts)
    open_tools: dict[str, ToolCall] = field(default_factory=dict)
    traced_tools: set[str] = field(default_factory=set)  # every tool_use id seen in this session
    agents: dict[str, AgentRun] = field(default_factory=dict)
    task_tools: dict[str, _TaskTool] = field(default_factory=dict)
    agent_links: dict[str, tuple[str, str]] = field(default_factory=dict)  # agent_id -> (tool_use_id, how)
    turn_index: list[tuple[int, int, int]] = field(default_factory=list)  # (start, trace_id, root span)
    open_owners: list[Owner] = field(default_factory=list)
    requests_sent: dict[str, int] = field(default_factory=dict)  # api-request id -> sent (until answered)
    # tool_use ids left without a result by a closed turn, until a resume repairs them or a new
    # prompt continues without them (rules.py: orphans)
    unrepaired: dict[str, str] = field(default_factory=dict)


class Assembler:
    """Assembles every session seen; one instance per pipeline."""

    def __init__(self, timeouts: Timeouts = Timeouts(), capture_content: bool = False) -> None:
        self.timeouts = timeouts
        self.capture_content = capture_content
        self._sessions: dict[str, _Session] = {}
        # digests (digest64) of API calls and prompts already traced: counted once
        # Packed (digests.py): a 1 GB history's call digests as a set of ints held ~7 MB.
        self._seen_calls = Digests()
        self._seen_prompts = Digests()
        self._open_calls: dict[str, Call] = {}  # calls not emitted yet, by key: a copy elsewhere may finish them
        # (kind "call"/"prompt", digest, path) of copies seen in another file: that file holds them too
        self.replays: list[tuple[str, int, str]] = []
        self._path = ""  # the file of the line being added
        self._unseen_agents: dict[tuple[str, str], int] = {}  # named subagents with no line yet
        self._active: set[str] = set()  # sessions with open owners: the only ones tick looks at
        self.new_owners: list[Owner] = []  # every owner created since the pipeline last looked
        self._out: list[Finished] = []
        self.counters: dict[str, int] = {}
        self._stalled_open = 0

    # -- public API -------------------------------------------------------------

    def add(self, entry: Entry, src: TranscriptFile, arrival_ns: int = 0) -> None:
        session_id = entry.session_id or src.session_id
        self._path = src.path
        if entry.api_request_id is not None and session_id is not None and entry.timestamp_ns is not None:
            sent = self._session(session_id).requests_sent
            if len(sent) < 1024:  # answered ones are removed; a bound for requests never answered
                sent[entry.api_request_id] = entry.timestamp_ns
            return
        if session_id is None or entry.uuid is None:
            return  # summaries, snapshots, queue operations: not part of the conversation tree
        sess = self._session(session_id)
        if entry.uuid in sess.owner_of:
            self._count("duplicate_uuid")
            return  # the same line again (a file read again from its start, a re-emitted line)
        kind = classify_user(entry) if entry.type == "user" else None
        repair = kind == "tool_result" and _is_repair(entry)
        if repair:
            for b in entry.blocks:
                if b.type == "tool_result" and b.id is not None:
                    sess.unrepaired.pop(b.id, None)  # the conversation keeps the call: no memory lost
        if src.kind is FileKind.MAIN and not entry.is_sidechain:
            owner = self._main_owner(sess, entry, kind)
        else:
            owner = self._agent_owner(sess, entry, src)
        if entry.type == "progress" and entry.progress_agent_id and entry.parent_tool_use_id:
            self._link_agent(sess, entry.progress_agent_id, entry.parent_tool_use_id, "progress")
        if owner is None:
            return
        ts = entry.timestamp_ns if entry.timestamp_ns is not None else owner.last_ns
        if repair or (owner.killed and entry.type == "assistant" and not rules.is_api_call(
                entry.model, entry.made_by, entry.is_api_error)):
            # Written by the resumed process, maybe hours later: the owner's activity, and the
            # repaired call, ended with the last line before the kill.
            ts, arrival_ns = owner.last_ns, 0
            owner.killed = True
        if src.path not in owner.first_offsets:
            if not owner.first_offsets and isinstance(owner, AgentRun) and owner.agent_id:
                self._unseen_agents.pop((sess.session_id, owner.agent_id), None)
            owner.first_offsets[src.path] = entry.offset
            self.new_owners.append(owner)  # its lines in this file hold that file's checkpoint
        sess.owner_of[entry.uuid] = (owner, ts)
        owner.uuids.append(entry.uuid)
        owner.last_ns = max(owner.last_ns, ts)
        owner.last_arrival_ns = max(owner.last_arrival_ns, arrival_ns)
        owner.version = entry.version or owner.version
        owner.cwd = entry.cwd or owner.cwd
        owner.git_branch = entry.git_branch or owner.git_branch
        owner.entrypoint = entry.entrypoint or owner.entrypoint
        if entry.type == "assistant":
            owner.awaiting_model = False
            self._assistant(sess, owner, entry, ts)
        elif entry.type == "user":
            owner.awaiting_model = kind in ("prompt", "tool_result", "notification")
            self._user(sess, owner, entry, ts, kind)
        elif entry.type == "system":
            self._system(owner, entry, ts)

    def preload(self, calls: Iterable[int], prompts: Iterable[int]) -> None:
        """Digests of calls and prompts delivered before a restart, each in ascending order
        (state.sorted_digests: not collected into a set first)."""
        self._seen_calls.update_sorted(calls)
        self._seen_prompts.update_sorted(prompts)

    def forget_seen(self, calls: set[int], prompts: set[int], keep: set[int]) -> None:
        """Digests no transcript on disk holds any more (state.held_only_by): no copy can come.
        ``keep``: digests of owners still open, whose late lines are recognised by them."""
        keep = keep | {digest64(k) for k in self._open_calls}
        self._seen_calls.difference_update(calls - keep)
        self._seen_prompts.difference_update(prompts - keep)

    def set_agent_meta(self, session_id: str, agent_id: str, meta: dict[str, object], now_ns: int = 0) -> None:
        """meta.json beside a 2.1.x subagent file: agentType, description, toolUseId, spawnDepth."""
        sess = self._session(session_id)
        agent = self._agent(sess, agent_id, agent_id, None)
        if isinstance(meta.get("agentType"), str):
            agent.agent_type = str(meta["agentType"])
        if isinstance(meta.get("description"), str):
            agent.description = str(meta["description"])
        depth = meta.get("spawnDepth")
        if isinstance(depth, int) and not isinstance(depth, bool):
            agent.spawn_depth = depth
        tool_use_id = meta.get("toolUseId")
        if isinstance(tool_use_id, str):
            self._link_agent(sess, agent_id, tool_use_id, "meta", now_ns)

    def tick(self, now_ns: int, alive: Callable[[str], bool | None] = lambda _sid: None) -> None:
        """Close what time has finished: quiet final answers, idle turns, orphaned tool calls,
        turns whose process died. ``alive(session_id)`` says whether the Claude Code process
        writing a session still runs (True/False), or None when unknown (no sessions/<pid>.json).
        """
        t = self.timeouts
        for sid in list(self._active):
            sess = self._sessions.get(sid)
            owners = self._open_owners(sess) if sess is not None else []
            if not owners:
                self._active.discard(sid)  # idle sessions cost nothing per tick
                continue
            assert sess is not None
            running = alive(sess.session_id)
            for owner in owners:
                self._release_superseded(owner)
                quiet = now_ns - self._last_activity(sess, owner)
                owes = bool(owner.open_tools) or owner.awaiting_model
                if running is False and (owes or not owner.final_seen):
                    self._close(sess, owner, "killed")
                elif owes and quiet >= t.stall_ns:
                    owner.stalled = True
                    if running is True:
                        continue  # a long tool or a slow model: stalled, not dead
                    if owner.open_tools:
                        self._close(sess, owner, "orphaned")
                    elif quiet >= 2 * t.stall_ns:
                        self._close(sess, owner, "incomplete")  # no reply ever came
                elif owner.open_tools:
                    continue
                elif owner.final_seen and quiet >= t.quiet_ns:
                    self._close(sess, owner, "completed")
                elif quiet >= t.idle_ns and not owes:
                    self._close(sess, owner, "incomplete")
        self._stalled_open = sum(1 for sid in self._active if sid in self._sessions
                                 for o in self._open_owners(self._sessions[sid]) if o.stalled)

    def shift_activity(self, step_ns: int) -> None:
        """The wall clock stepped forward: open owners' last activity moves with it (no silence)."""
        for sid in self._active:
            sess = self._sessions.get(sid)
            for owner in self._open_owners(sess) if sess is not None else []:
                owner.last_arrival_ns = max(owner.last_ns, owner.last_arrival_ns) + step_ns
        self._unseen_agents = {k: named + step_ns for k, named in self._unseen_agents.items()}

    def missing_agents(self, now_ns: int, after_ns: int) -> list[tuple[str, str]]:
        """(session, agent id) of subagents named (by toolUseResult.agentId or meta.json) at least
        ``after_ns`` ago whose transcript never had a line; each is returned once."""
        out = []
        for key, named in list(self._unseen_agents.items()):
            if now_ns - named >= after_ns:
                del self._unseen_agents[key]
                out.append(key)
        return out

    def unseen_agents(self) -> list[tuple[str, str, int]]:
        """(session, agent id, when named) of named subagents whose transcript had no line yet."""
        return [(sid, agent_id, named) for (sid, agent_id), named in self._unseen_agents.items()]

    def expect_agents(self, agents: list[tuple[str, str, int]]) -> None:
        """Take over subagents another assembler was waiting for (a catch-up worker's)."""
        for sid, agent_id, named in agents:
            self._unseen_agents.setdefault((sid, agent_id), named)

    def current_turn(self, session_id: str) -> Turn | None:
        """The session's latest turn if still open (the branch a resume continues from)."""
        sess = self._sessions.get(session_id)
        return sess.current_turn if sess is not None else None

    def stalled_now(self) -> int:
        """Open owners stalled at the last tick (an int the tick publishes: a scrape thread reads
        it while the pipeline thread changes the sessions)."""
        return self._stalled_open

    def flush(self, now_ns: int | None = None, session_id: str | None = None,
              alive: Callable[[str], bool | None] = lambda _sid: None) -> int:
        """End of a backfill pass: close every owner that is safe to close.

        An owner still waiting for a tool result that is younger than the stall timeout is kept
        open (its session may still be running), unless ``alive`` says its process is gone;
        returns how many stay open. With now_ns None everything closes (the data is known to be
        complete).
        """
        kept = 0
        sessions = [self._sessions[session_id]] if session_id in self._sessions else (
            [] if session_id is not None else list(self._sessions.values()))
        for sess in sessions:
            owners = self._open_owners(sess)
            running = alive(sess.session_id) if owners and now_ns is not None else None
            for owner in owners:
                quiet = None if now_ns is None else now_ns - self._last_activity(sess, owner)
                if running is False and (owner.open_tools or owner.awaiting_model or not owner.final_seen):
                    self._close(sess, owner, "killed")  # its process is gone: nothing more will come
                elif not owner.open_tools and (quiet is None or owner.final_seen or quiet >= self.timeouts.idle_ns):
                    self._close(sess, owner, "completed" if owner.final_seen else "incomplete")
                elif owner.open_tools and (quiet is None or quiet >= self.timeouts.stall_ns):
                    self._close(sess, owner, "orphaned")
                else:
                    kept += 1  # recent and unfinished: its session may still be running
            self._resolve_leftover_agents(sess)
            if kept == 0 and not self._open_owners(sess):
                self._forget(sess)
        return kept

    def drain(self) -> list[Finished]:
        out, self._out = self._out, []
        return out

    def open_count(self) -> int:
        return sum(len(self._open_owners(s)) for s in self._sessions.values())

    # -- ownership ---------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        sess = self._sessions.get(session_id)
        if sess is None:
            sess = self._sessions[session_id] = _Session(session_id)
        return sess

    def _main_owner(self, sess: _Session, e: Entry, kind: str | None) -> Owner | None:
        """``kind``: classify_user of a user line, else None."""
        turn = sess.current_turn
        if kind is not None and rules.starts_turn(kind, turn is not None and not turn.closed and not turn.final_seen):
            if e.uuid is not None and digest64(e.uuid) in self._seen_prompts:
                self._count("replayed_prompts")
                self.replays.append(("prompt", digest64(e.uuid), self._path))
                return None  # a session's history copied into a new session file: traced once
            return self._start_turn(sess, e, kind)
        parent = e.parent_uuid or e.logical_parent_uuid
        found = sess.owner_of.get(parent) if parent else None
        if found is not None and not found[0].closed:
            return found[0]
        if sess.current_turn is not None and not sess.current_turn.closed:
            return sess.current_turn
        if e.type == "assistant" and e.message_id and rules.is_api_call(e.model, e.made_by, e.is_api_error):
            key = digest64(rules.call_key(e.message_id, e.request_id))
            if key in self._seen_calls:
                self.replays.append(("call", key, self._path))  # a copy of a call traced before
            elif not (e.uuid and digest64(e.uuid) in self._seen_prompts):
                # Lines that answer no prompt we saw (a continuation after a closed turn, a file
                # read from a checkpoint): their calls still get a trace.
                return self._start_turn(sess, e, "continuation")
        return None

    def _start_turn(self, sess: _Session, e: Entry, kind: str | None) -> Turn:
        prev = sess.current_turn
        if prev is not None and not prev.closed:
            # A new prompt supersedes the turn: a tool call still without result is a dead branch.
            self._close(sess, prev, "orphaned" if prev.open_tools else "completed")
        lost, sess.unrepaired = len(sess.unrepaired), {}
        ts = e.timestamp_ns or 0
        uuid = e.uuid or ""
        trace = ids.trace_id(sess.session_id, uuid)
        turn = Turn(
            session_id=sess.session_id, key=uuid, start_ns=ts, last_ns=ts,
            span_id=ids.span_id("turn", sess.session_id, uuid), trace_id=trace,
            prompt_uuid=uuid, trigger=kind or "continuation", lost_tools=lost,
        )
        if self.capture_content and e.type == "user":
            turn.prompt_text = next((b.text for b in e.blocks if b.type == "text"), None)
        self._seen_prompts.add(digest64(uuid))
        self.new_owners.append(turn)
        sess.current_turn = turn
        sess.open_owners.append(turn)
        self._active.add(sess.session_id)
        sess.turn_index.append((ts, trace, turn.span_id))
        return turn

    def _agent_owner(self, sess: _Session, e: Entry, src: TranscriptFile) -> Owner | None:
        if src.kind is not FileKind.MAIN:
            agent_id = src.agent_id or e.agent_id or "unknown"
            return self._agent(sess, agent_id, agent_id, e)
        # 1.0.x inline sidechain: a root (no parent) starts an agent, the rest follow the tree.
        found = sess.owner_of.get(e.parent_uuid) if e.parent_uuid else None
        if found is not None:
            owner = found[0]
            if owner.closed and isinstance(owner, AgentRun):
                owner.closed = False
                sess.open_owners.append(owner)
                self._active.add(sess.session_id)
            return owner
        agent = self._agent(sess, e.agent_id or e.uuid or "unknown", e.agent_id, e)
        if e.type == "user" and e.blocks and e.blocks[0].type == "text" and agent.tool_use_id is None:
            agent.prompt_key = e.blocks[0].id
            self._link_by_prompt(sess, agent)
        return agent

    def _agent(self, sess: _Session, key: str, agent_id: str | None, e: Entry | None) -> AgentRun:
        agent = sess.agents.get(key)
        ts = e.timestamp_ns if e is not None and e.timestamp_ns is not None else 0
        if agent is None:
            agent = AgentRun(
                session_id=sess.session_id, key=key, start_ns=ts, last_ns=ts,
                span_id=ids.span_id("agent", sess.session_id, key), agent_id=agent_id,
            )
            sess.agents[key] = agent
            self.new_owners.append(agent)
            if agent_id and agent_id in sess.agent_links:
                tool_use_id, how = sess.agent_links[agent_id]
                self._set_agent_tool(sess, agent, tool_use_id, how)
        if e is not None:
            if agent.start_ns == 0 or (ts and ts < agent.start_ns):
                agent.start_ns = ts
            if agent.closed:
                agent.closed = False  # late lines of a closed agent: same span ids, new children
            if agent not in sess.open_owners:
                sess.open_owners.append(agent)
                self._active.add(sess.session_id)
        return agent

    def _link_agent(self, sess: _Session, agent_id: str, tool_use_id: str, how: str, named_ns: int = 0) -> None:
        if named_ns:
            agent = sess.agents.get(agent_id)
            if (agent is None or not agent.first_offsets) and (sess.session_id, agent_id) not in self._unseen_agents:
                self._unseen_agents[(sess.session_id, agent_id)] = named_ns
        if agent_id in sess.agent_links:
            return
        sess.agent_links[agent_id] = (tool_use_id, how)
        agent = sess.agents.get(agent_id)
        if agent is not None and agent.tool_use_id is None:
            self._set_agent_tool(sess, agent, tool_use_id, how)

    def _set_agent_tool(self, sess: _Session, agent: AgentRun, tool_use_id: str, how: str) -> None:
        agent.tool_use_id = tool_use_id
        agent.link = how
        task = sess.task_tools.get(tool_use_id)
        if task is not None:
            task.agent_key = agent.key
            if agent not in task.owner.children:
                task.owner.children.append(agent)
                agent.parent = task.owner
            agent.background = agent.background or task.background
            agent.agent_type = agent.agent_type or task.subagent_type
        self._resolve_agents(sess)

    def _link_by_prompt(self, sess: _Session, agent: AgentRun) -> None:
        for task in sess.task_tools.values():
            if task.agent_key is None and task.prompt_key and task.prompt_key == agent.prompt_key:
                task.agent_key = agent.key
                self._set_agent_tool(sess, agent, task.tool_use_id, "prompt")
                return

    # -- line handlers -----------------------------------------------------------

    def _assistant(self, sess: _Session, owner: Owner, e: Entry, ts: int) -> None:
        if e.message_id is None or not rules.is_api_call(e.model, e.made_by, e.is_api_error):
            return  # a line Claude Code wrote itself ("No response requested.", a repair): no API call
        call = owner.current
        if e.request_id is None and call is not None and call.message_id == e.message_id:
            key = call.key  # a line of the current response that lost its requestId
        else:
            key = rules.call_key(e.message_id, e.request_id)
        if call is None or call.key != key:
            previous = owner.superseded
            if previous is not None and previous.key == key:
                # A line of the response before, after another response's line (a side branch):
                # that response is still held open, so nothing of it is lost.
                owner.superseded, owner.current = call, previous
                call = previous
            elif digest64(key) in self._seen_calls:
                if key in owner.call_keys:
                    self._late_line(sess, owner, key, e, ts)
                    return
                self._count("replayed_message_lines")
                self.replays.append(("call", digest64(key), self._path))
                live = self._open_calls.get(key)
                if live is not None:  # counted once, with the final snapshot, whichever file has it
                    self._merge_snapshot(live, e)
                return  # the same API response replayed (resume, copied session): counted once
            else:
                call = self._new_call(sess, owner, key, e, ts)
        call.lines += 1
        call.end_ns = max(call.end_ns, ts)
        call.model = e.model or call.model
        call.version, call.cwd, call.git_branch = e.version, e.cwd, e.git_branch
        self._merge_snapshot(call, e)
        call.requested_model = e.requested_model or call.requested_model
        call.effort = e.effort or call.effort
        if e.is_api_error:
            call.is_api_error = True
            call.error_text = e.error_text
            owner.api_errors += 1
        self._tool_uses(sess, owner, call, e, ts)
        owner.final_seen = call.stop_reason in _FINAL_STOP or call.is_api_error
        # More lines of this response are due: the model owes them (stall timeout, not idle).
        owner.awaiting_model = not call.is_api_error and rules.response_continues(e, call.stop_reason,
                                                                                  bool(call.tool_ids))

    @staticmethod
    def _merge_snapshot(call: Call, e: Entry) -> None:
        """Another line (or copy) of a call: the final snapshot of its usage wins (rules.py)."""
        if e.usage is not None and (call.usage is None or rules.is_final_snapshot(e.usage, call.usage)):
            call.usage = e.usage
        if len(e.advisors) > len(call.advisors):
            call.advisors = e.advisors  # written with the final snapshot
        if e.stop_reason is not None:
            call.stop_reason = e.stop_reason

    def _tool_uses(self, sess: _Session, owner: Owner, call: Call, e: Entry, ts: int) -> None:
        for b in e.blocks:
            if b.type == "tool_use" and b.id and b.id not in sess.traced_tools:
                sess.traced_tools.add(b.id)  # a tool_use written twice (re-read, replay) is traced once
                self._tool_use(sess, owner, call, b.id, b.name or "unknown", b.input, ts)

    def _late_line(self, sess: _Session, owner: Owner, key: str, e: Entry, ts: int) -> None:
        """A line of a response whose chat span already went out (another response's line came in
        between): its tool calls are still traced, under that chat span."""
        self._count("late_message_lines")
        stub = Call(key=key, message_id=e.message_id or "", request_id=e.request_id, start_ns=ts, end_ns=ts,
                    first_uuid=e.uuid, parent_uuid=e.parent_uuid, owner=owner)
        self._tool_uses(sess, owner, stub, e, ts)

    def _tool_use(self, sess: _Session, owner: Owner, call: Call, tool_id: str, name: str,
                  tool_input: object, ts: int) -> None:
        tool = ToolCall(tool_use_id=tool_id, name=name, call_key=call.key, start_ns=ts, owner=owner)
        if self.capture_content:
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
            sess.task_tools[tool_id] = _TaskTool(
                tool_id, owner, ids.span_id("tool", sess.session_id, tool_id),
                info.get("subagent_type") if isinstance(info.get("subagent_type"), str) else None,
                prompt_key, background,
            )
            for agent_id, (tuid, how) in list(sess.agent_links.items()):
                if tuid == tool_id and agent_id in sess.agents:
                    self._set_agent_tool(sess, sess.agents[agent_id], tool_id, how)
            self._resolve_agents(sess)

    def _user(self, sess: _Session, owner: Owner, e: Entry, ts: int, kind: str | None) -> None:
        if kind == "interrupt":
            owner.interrupted = True
            return
        if kind != "tool_result":
            return
        for b in e.blocks:
            if b.type != "tool_result" or b.id is None:
                continue
            tool = sess.open_tools.pop(b.id, None)
            if tool is None:
                self._count("unmatched_tool_results")
                continue
            tool.end_ns = ts
            text = b.text or ""
            if rules.is_repair_text(text):
                tool.is_error, tool.error_type, tool.repaired = True, "interrupted", True
                (tool.owner or owner).orphaned_tools += 1
            elif text.startswith(_INTERRUPT_PREFIX) or (e.tool_use_result or {}).get("interrupted") is True:
                tool.is_error, tool.error_type = True, "interrupted"
            elif e.tool_use_result_error == "User rejected tool use":
                tool.is_error, tool.error_type = True, "rejected"
            elif b.is_error:
                tool.is_error, tool.error_type = True, "tool_error"
            if self.capture_content:
                tool.result_text = b.text
            result = e.tool_use_result or {}
            agent_id = result.get("agentId")
            if isinstance(agent_id, str) and tool.name in _TASK_TOOLS:
                tool.agent_id = agent_id
                self._link_agent(sess, agent_id, tool.tool_use_id, "result", ts)
            tool_owner = tool.owner or owner
            tool_owner.open_tools.pop(tool.tool_use_id, None)
            self._emit(tool_owner, tool)

    def _system(self, owner: Owner, e: Entry, ts: int) -> None:
        if e.subtype == "compact_boundary":
            owner.compactions.append((ts, e.compact_trigger, e.compact_pre_tokens))
        elif e.subtype == "api_error":
            owner.api_retries += 1
        elif rules.ends_turn(e) and isinstance(owner, Turn) and not owner.open_tools:  # turn_duration
            owner.final_seen = True

    def _new_call(self, sess: _Session, owner: Owner, key: str, e: Entry, ts: int) -> Call:
        """A new API response. The one before is held (superseded) until the one after it starts,
        a tick, or the owner closes: a stray line of it may still come."""
        self._release_superseded(owner)
        owner.superseded = owner.current
        parent_ts = sess.owner_of.get(e.parent_uuid, (None, ts))[1] if e.parent_uuid else ts
        sent = sess.requests_sent.pop(e.request_ref, None) if e.request_ref else None
        call = Call(
            key=key, message_id=e.message_id or "", request_id=e.request_id,
            # when the request was sent (2.1.3xx's api-request line), else the line it answers
            start_ns=sent if sent is not None and sent <= ts else min(parent_ts, ts), end_ns=ts,
            first_uuid=e.uuid, parent_uuid=e.parent_uuid,
            is_sidechain=e.is_sidechain, agent_id=e.agent_id, owner=owner,
            sent_ns=sent, first_line_ns=ts,
        )
        self._seen_calls.add(digest64(key))
        self._open_calls[key] = call
        owner.call_keys.append(key)
        owner.current = call
        owner.calls += 1
        owner.final_seen = False
        return call

    def _release_superseded(self, owner: Owner) -> None:
        if owner.superseded is not None:
            call, owner.superseded = owner.superseded, None
            if call.stop_reason is None and rules.writes_final_usage(call.version):
                owner.held.append(call)  # an early copy: its final snapshot may be in another file
            else:
                self._emit(owner, call)

    # -- finishing ---------------------------------------------------------------

    def _finish_call(self, owner: Owner, call: Call) -> None:
        if owner.current is call:
            owner.current = None
        self._emit(owner, call)

    def _close(self, sess: _Session, owner: Owner, outcome: str) -> None:
        if owner.closed:
            return
        self._release_superseded(owner)
        if owner.current is not None:
            self._finish_call(owner, owner.current)
        held, owner.held = owner.held, []
        for call in held:
            self._emit(owner, call)
        if owner.killed and outcome in ("completed", "incomplete", "orphaned"):
            outcome = "killed"
        for tool in list(owner.open_tools.values()):
            sess.open_tools.pop(tool.tool_use_id, None)
            tool.end_ns = max(owner.last_ns, tool.start_ns)
            tool.is_error = True
            tool.error_type = "interrupted" if owner.interrupted else "orphaned"
            if tool.error_type == "orphaned":
                owner.orphaned_tools += 1
                if len(sess.unrepaired) < 256:
                    sess.unrepaired[tool.tool_use_id] = tool.name
            self._emit(owner, tool)
        owner.open_tools.clear()
        owner.closed = True
        for uuid in owner.uuids:
            found = sess.owner_of.get(uuid)
            if found is not None and found[0] is owner:
                del sess.owner_of[uuid]
        owner.uuids = []
        if owner in sess.open_owners:
            sess.open_owners.remove(owner)
        if isinstance(owner, Turn):
            owner.outcome = "interrupted" if owner.interrupted and outcome != "killed" else outcome
            if sess.current_turn is owner:
                sess.current_turn = None
            self._emit(owner, owner)
        else:
            self._emit(owner, owner)

    def _emit(self, owner: Owner, item: Turn | AgentRun | Call | ToolCall) -> None:
        if owner.trace_id is None:
            owner.waiting.append(Finished(item, 0, None))
            return
        if isinstance(item, (Turn, AgentRun)):
            if isinstance(item, AgentRun):
                if item.span_emitted:
                    return
                item.span_emitted = True
            self._out.append(Finished(item, owner.trace_id, owner.parent_span_id))
        elif isinstance(item, Call):
            self._open_calls.pop(item.key, None)
            self._out.append(Finished(item, owner.trace_id, owner.span_id))
        else:
            parent = ids.span_id("chat", item.call_key)
            self._out.append(Finished(item, owner.trace_id, parent))

    def _resolve_agents(self, sess: _Session) -> None:
        """Give every agent whose spawning tool is known a trace; repeat for nested agents."""
        progress = True
        while progress:
            progress = False
            for agent in sess.agents.values():
                if agent.trace_id is not None or agent.tool_use_id is None:
                    continue
                task = sess.task_tools.get(agent.tool_use_id)
                if task is None or task.owner.trace_id is None:
                    continue
                self._set_context(agent, task.owner.trace_id, task.span_id)
                progress = True

    def _set_context(self, agent: AgentRun, trace: int, parent_span: int | None) -> None:
        agent.trace_id = trace
        agent.parent_span_id = parent_span
        waiting, agent.waiting = agent.waiting, []
        for f in waiting:
            self._emit(agent, f.item)

    def _resolve_leftover_agents(self, sess: _Session) -> None:
        """Agents whose spawning tool never appeared: under the turn running when they started,
        or in a trace of their own (a subagent file whose parent file is gone)."""
        agents = sorted(sess.agents.values(), key=lambda a: a.start_ns)
        for cycle_pass in (False, True):
            for agent in agents:
                if agent.trace_id is not None:
                    continue
                self._resolve_agents(sess)
                if agent.trace_id is not None:
                    continue
                if not cycle_pass and agent.tool_use_id is not None and agent.tool_use_id in sess.task_tools:
                    continue  # its parent agent resolves first, unless they spawn each other (a cycle)
                self._resolve_by_time(sess, agent)

    def _resolve_by_time(self, sess: _Session, agent: AgentRun) -> None:
        turn = None
        for start, trace, root in sess.turn_index:
            if start <= agent.start_ns:
                turn = (trace, root)
        if turn is not None:
            agent.link = agent.link or "time"
            self._set_context(agent, turn[0], turn[1])
        else:
            agent.link = agent.link or "none"
            self._set_context(agent, ids.trace_id(sess.session_id, "agent", agent.key), None)
        self._resolve_agents(sess)

    def _last_activity(self, sess: _Session, owner: Owner, depth: int = 0) -> int:
        """Latest line of the owner or of a subagent still working for one of its open tool calls:
        a main file is silent while its foreground subagents run."""
        last = max(owner.last_ns, owner.last_arrival_ns)
        if depth > 8:
            return last
        for tool_id in owner.open_tools:
            task = sess.task_tools.get(tool_id)
            agent = sess.agents.get(task.agent_key) if task and task.agent_key else None
            if agent is not None:
                last = max(last, self._last_activity(sess, agent, depth + 1))
        return last

    def _open_owners(self, sess: _Session) -> list[Owner]:
        return [o for o in sess.open_owners if not o.closed]

    def _forget(self, sess: _Session) -> None:
        """Drop a finished session's state; its message keys stay for cross-file dedupe."""
        if all(a.trace_id is not None for a in sess.agents.values()):
            self._sessions.pop(sess.session_id, None)

    def _count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1


def _is_repair(e: Entry) -> bool:
    return any(b.type == "tool_result" and rules.is_repair_text(b.text) for b in e.blocks)

