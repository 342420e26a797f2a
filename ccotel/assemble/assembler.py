"""Assemble stage: Entries of a session's files -> finished turns, API calls, tool calls and subagent runs.

Pure: no I/O and no clocks (callers pass ``now_ns``). Everything a span needs is decided here;
spans/ only formats it. The Assembler drives the stage: it takes each line to its owner
(placement.py), builds the API calls of assistant lines here and the tool calls of their blocks
(tools.py), closes owners when their time is up (closing.py), and hands out what finished
(outbox.py). What it builds is in model.py.

An API response read again (a resume, a session's history copied into a new session file) is
counted once: the digests of calls and prompts already traced are kept across sessions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ccotel.assemble.closing import Timeouts, flush_session, open_owners, release_superseded, tick_session
from ccotel.assemble.digests import Digests, digest64
from ccotel.assemble.model import AgentRun, Call, Correction, Finished, Owner, Session, Turn
from ccotel.assemble.outbox import Outbox
from ccotel.assemble.placement import agent, agent_owner, link_agent, resolve_leftover_agents, start_turn
from ccotel.assemble.tools import close_tools, is_repair, open_tools
from ccotel.records import Entry, FileKind, TranscriptFile
from ccotel.rules import transcript as rules

__all__ = ["Assembler"]

_FINAL_STOP = rules.FINAL_STOP
_classify_user = rules.classify_user
_TIMEOUTS = Timeouts()  # the defaults


class Assembler:
    """Assembles every session seen; one instance per pipeline."""

    def __init__(self, timeouts: Timeouts = _TIMEOUTS, capture_content: bool = False) -> None:
        self.timeouts = timeouts
        self.capture_content = capture_content
        self._sessions: dict[str, Session] = {}
        # digests (digest64) of API calls and prompts already traced: counted once
        # Packed (digests.py): a set of ints would hold a long history's call digests in several times the memory.
        self._seen_calls = Digests()
        self._seen_prompts = Digests()
        # (kind "call"/"prompt", digest, path) of copies seen in another file: that file holds them too
        self.replays: list[tuple[str, int, str]] = []
        self._path = ""  # the file of the line being added
        self._in_agent_file = False  # the line being added is in a subagent's file
        # digests of the message ids of the calls traced: a sidechain's replay under a new requestId
        self._seen_messages = Digests()
        self._unseen_agents: dict[tuple[str, str], int] = {}  # named subagents with no line yet
        self._active: set[str] = set()  # sessions with open owners: the only ones tick looks at
        self.new_owners: list[Owner] = []  # every owner created since the pipeline last looked
        self._outbox = Outbox()
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
        if session_id is None:
            return
        if entry.uuid is None:
            if entry.type != "assistant" or not rules.counts_a_call(entry.message_id, entry.usage is not None):
                return  # summaries, snapshots, queue operations: not part of the conversation tree
            # A call written without its envelope (other tools' lines in Claude Code's format):
            # counted, placed where its session's lines lead, named by its place in its file.
            key = rules.call_key(entry.message_id or "", entry.request_id)
            entry = dataclasses.replace(entry, uuid=f"line:{key}@{entry.offset}")
        sess = self._session(session_id)
        self._in_agent_file = src.kind is not FileKind.MAIN
        if entry.uuid in sess.owner_of:
            self._count("duplicate_uuid")
            self._copy_snapshot(entry, sess.owner_of[entry.uuid][0], session_id)
            return  # the same line again (a file read again from its start, a re-emitted line)
        kind = _classify_user(entry) if entry.type == "user" else None
        repair = kind == "tool_result" and is_repair(entry)
        if repair:
            for b in entry.blocks:
                if b.type == "tool_result" and b.id is not None:
                    sess.unrepaired.pop(b.id, None)  # the conversation keeps the call: no memory lost
        if src.kind is FileKind.MAIN and not entry.is_sidechain:
            owner = self._main_owner(sess, entry, kind)
        else:
            owner = agent_owner(sess, entry, src, self._outbox, self.new_owners, self._active)
        if entry.type == "progress" and entry.progress_agent_id and entry.parent_tool_use_id:
            link_agent(sess, entry.progress_agent_id, entry.parent_tool_use_id, "progress", self._outbox,
                       self._unseen_agents)
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
        uuid = entry.uuid
        assert uuid is not None  # given above to a line without one
        sess.owner_of[uuid] = (owner, ts)
        owner.uuids.append(uuid)
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
            if kind == "interrupt":
                owner.interrupted = True
            elif kind == "tool_result":
                unmatched = close_tools(sess, owner, entry, ts, self._outbox, self._unseen_agents,
                                        self.capture_content)
                if unmatched:
                    self._count("unmatched_tool_results", unmatched)
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
        keep = keep | {digest64(k) for k in self._outbox.open_calls}
        self._seen_calls.difference_update(calls - keep)
        self._seen_prompts.difference_update(prompts - keep)

    def set_agent_meta(self, session_id: str, agent_id: str, meta: dict[str, object], now_ns: int = 0) -> None:
        """meta.json beside a 2.1.x subagent file: agentType, description, toolUseId, spawnDepth."""
        sess = self._session(session_id)
        run = agent(sess, agent_id, agent_id, None, self._outbox, self.new_owners, self._active)
        if isinstance(meta.get("agentType"), str):
            run.agent_type = str(meta["agentType"])
        if isinstance(meta.get("description"), str):
            run.description = str(meta["description"])
        depth = meta.get("spawnDepth")
        if isinstance(depth, int) and not isinstance(depth, bool):
            run.spawn_depth = depth
        tool_use_id = meta.get("toolUseId")
        if isinstance(tool_use_id, str):
            link_agent(sess, agent_id, tool_use_id, "meta", self._outbox, self._unseen_agents, now_ns)

    def tick(self, now_ns: int, alive: Callable[[str], bool | None] = lambda _sid: None) -> None:
        """Close what time has finished: quiet final answers, idle turns, orphaned tool calls,
        turns whose process died. ``alive(session_id)`` says whether the Claude Code process
        writing a session still runs (True/False), or None when unknown (no sessions/<pid>.json).
        """
        for sid in list(self._active):
            sess = self._sessions.get(sid)
            owners = open_owners(sess) if sess is not None else []
            if not owners:
                self._active.discard(sid)  # idle sessions cost nothing per tick
                continue
            assert sess is not None
            tick_session(sess, owners, now_ns, alive(sess.session_id), self.timeouts, self._outbox)
        self._stalled_open = sum(1 for sid in self._active if sid in self._sessions
                                 for o in open_owners(self._sessions[sid]) if o.stalled)

    def shift_activity(self, step_ns: int) -> None:
        """The wall clock stepped forward: open owners' last activity moves with it (no silence)."""
        for sid in self._active:
            sess = self._sessions.get(sid)
            for owner in open_owners(sess) if sess is not None else []:
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
        open (its session may still be running), unless ``alive`` says its process is gone; one
        that owes a tool result or a reply while ``alive`` says its process runs is kept however
        old; returns how many stay open. With now_ns None everything closes (the data is known to be
        complete).
        """
        kept = 0
        sessions = [self._sessions[session_id]] if session_id in self._sessions else (
            [] if session_id is not None else list(self._sessions.values()))
        for sess in sessions:
            owners = open_owners(sess)
            running = alive(sess.session_id) if owners and now_ns is not None else None
            kept += flush_session(sess, owners, now_ns, running, self.timeouts, self._outbox)
            resolve_leftover_agents(sess, self._outbox)
            if kept == 0 and not open_owners(sess):
                self._forget(sess)
        return kept

    def drain(self) -> list[Finished]:
        return self._outbox.drain()

    def drain_corrections(self) -> list[Correction]:
        """Later, larger snapshots (maybe) of calls whose spans were built (pipeline._correct)."""
        return self._outbox.drain_corrections()

    def open_count(self) -> int:
        return sum(len(open_owners(s)) for s in self._sessions.values())

    # -- ownership ---------------------------------------------------------------

    def _session(self, session_id: str) -> Session:
        sess = self._sessions.get(session_id)
        if sess is None:
            sess = self._sessions[session_id] = Session(session_id)
        return sess

    def _main_owner(self, sess: Session, e: Entry, kind: str | None) -> Owner | None:
        """``kind``: classify_user of a user line, else None."""
        turn = sess.current_turn
        if kind is not None and rules.starts_turn(kind, turn is not None and not turn.closed and not turn.final_seen):
            if e.uuid is not None and digest64(e.uuid) in self._seen_prompts:
                self._count("replayed_prompts")
                self.replays.append(("prompt", digest64(e.uuid), self._path))
                return None  # a session's history copied into a new session file: traced once
            return start_turn(sess, e, kind, self._outbox, self.new_owners, self._active, self._seen_prompts,
                              self.capture_content)
        parent = e.parent_uuid or e.logical_parent_uuid
        found = sess.owner_of.get(parent) if parent else None
        owner = found[0] if found is not None and not found[0].closed else (
            turn if turn is not None and not turn.closed else None)
        if owner is not None and not self._calls_after_final_answer(owner, e):
            return owner
        line_key = rules.line_call_key(e.message_id, e.request_id, e.uuid if e.usage is not None else None)
        if e.type == "assistant" and line_key is not None and rules.is_api_call(e.model, e.made_by, e.is_api_error):
            key = digest64(line_key)
            if key in self._seen_calls:
                self.replays.append(("call", key, self._path))  # a copy of a call traced before
                self._copy_snapshot(e, None, sess.session_id, line_key)
            elif not (e.uuid and digest64(e.uuid) in self._seen_prompts):
                # Lines that answer no prompt we saw (a continuation after a closed turn, a file
                # read from a checkpoint): their calls still get a trace.
                return start_turn(sess, e, "continuation", self._outbox, self.new_owners, self._active,
                                  self._seen_prompts, self.capture_content)
        return None

    def _calls_after_final_answer(self, owner: Owner, e: Entry) -> bool:
        """Is ``e`` the first line of a new API call of a turn whose final answer is written? Such a
        call starts a turn of its own (a continuation), as it does once the turn closed: a turn ends at
        its final answer in the transcript, not when it is read (docs/spans.md, "Where a line goes")."""
        if not (isinstance(owner, Turn) and owner.final_seen and e.type == "assistant"):
            return False  # every line asks: the cheap tests first
        line_key = rules.line_call_key(e.message_id, e.request_id, e.uuid if e.usage is not None else None)
        if line_key is None or not rules.is_api_call(e.model, e.made_by, e.is_api_error):
            return False
        call = owner.current
        if call is not None and e.message_id and call.message_id == e.message_id:
            return False  # another line of the final answer
        return (digest64(line_key) not in self._seen_calls
                and not (e.uuid and digest64(e.uuid) in self._seen_prompts))

    # -- line handlers -----------------------------------------------------------

    def _assistant(self, sess: Session, owner: Owner, e: Entry, ts: int) -> None:
        if not rules.is_api_call(e.model, e.made_by, e.is_api_error):
            return  # a line Claude Code wrote itself ("No response requested.", a repair): no API call
        call = owner.current
        if e.message_id and e.request_id is None and call is not None and call.message_id == e.message_id:
            key = call.key  # a line of the current response that lost its requestId
        else:
            line_key = rules.line_call_key(e.message_id, e.request_id, e.uuid if e.usage is not None else None)
            if line_key is None:
                return  # no message id and no usage: nothing to count
            key = line_key
        if e.message_id and rules.replays_parent_message(
                self._in_agent_file, digest64(e.message_id) in self._seen_messages, digest64(key) in self._seen_calls):
            self._count("replayed_message_lines")  # a /btw side question's copy of the parent's response
            return
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
                    self._copy_snapshot(e, owner, sess.session_id, key)  # it may carry a later snapshot
                    return
                self._count("replayed_message_lines")
                self.replays.append(("call", digest64(key), self._path))
                self._copy_snapshot(e, owner, sess.session_id, key)
                return  # the same API response replayed (resume, copied session): counted once
            else:
                call = self._new_call(sess, owner, key, e, ts)
        call.lines += 1
        call.end_ns = max(call.end_ns, ts)
        shared = sess.strings  # one copy of what every line repeats: the call is held until its session is read
        call.model = shared[e.model] if e.model else call.model
        call.version = None if e.version is None else shared[e.version]
        call.cwd = None if e.cwd is None else shared[e.cwd]
        call.git_branch = None if e.git_branch is None else shared[e.git_branch]
        self._merge_snapshot(call, e)
        if call.stop_reason is not None:
            call.stop_reason = shared[call.stop_reason]
        call.requested_model = e.requested_model or call.requested_model
        call.effort = e.effort or call.effort
        if e.is_api_error:
            call.is_api_error = True
            call.error_text = e.error_text
            owner.api_errors += 1
        open_tools(sess, owner, call, e, ts, self._outbox, self.capture_content)
        owner.final_seen = call.stop_reason in _FINAL_STOP or call.is_api_error
        # More lines of this response are due: the model owes them (stall timeout, not idle).
        owner.awaiting_model = not call.is_api_error and rules.response_continues(e, call.stop_reason,
                                                                                  bool(call.tool_ids))

    def _copy_snapshot(self, e: Entry, owner: Owner | None, session_id: str, key: str | None = None) -> None:
        """A copy of a call's line (another file, a line written again): counted once, with the
        final snapshot whichever file has it, merged into the call while its span is not built;
        once built, handed out as a Correction (the pipeline keeps the larger). ``owner``: the
        copy's, None when no owner takes the line (a copied session's history: not corrected)."""
        if e.type != "assistant" or e.usage is None or not rules.is_api_call(e.model, e.made_by, e.is_api_error):
            return
        key = key or rules.line_call_key(e.message_id, e.request_id, e.uuid)
        if key is None:
            return
        live = self._outbox.unbuilt_call(key)
        if live is not None:
            self._merge_snapshot(live, e)
        elif owner is not None and digest64(key) in self._seen_calls and not e.is_api_error:
            self._outbox.correct(Correction(key, e.message_id or "", e.request_id, e.model, e.usage, session_id,
                                            e.timestamp_ns or owner.last_ns, owner))

    @staticmethod
    def _merge_snapshot(call: Call, e: Entry) -> None:
        """Another line (or copy) of a call: the final snapshot of its usage wins (rules/transcript.py)."""
        if e.usage is not None and (call.usage is None or rules.is_final_snapshot(e.usage, call.usage)):
            call.usage = e.usage
        if len(e.advisors) > len(call.advisors):
            call.advisors = e.advisors  # written with the final snapshot
        if e.stop_reason is not None:
            call.stop_reason = e.stop_reason

    def _late_line(self, sess: Session, owner: Owner, key: str, e: Entry, ts: int) -> None:
        """A line of a response whose chat span already went out (another response's line came in
        between): its tool calls are still traced, under that chat span."""
        self._count("late_message_lines")
        stub = Call(key=key, message_id=e.message_id or "", request_id=e.request_id, start_ns=ts, end_ns=ts,
                    first_uuid=e.uuid, parent_uuid=e.parent_uuid, owner=owner)
        open_tools(sess, owner, stub, e, ts, self._outbox, self.capture_content)

    def _system(self, owner: Owner, e: Entry, ts: int) -> None:
        if e.subtype == "compact_boundary":
            owner.compactions.append((ts, e.compact_trigger, e.compact_pre_tokens))
        elif e.subtype == "api_error":
            owner.api_retries += 1
        elif rules.ends_turn(e) and isinstance(owner, Turn) and not owner.open_tools:  # turn_duration
            owner.final_seen = True

    def _new_call(self, sess: Session, owner: Owner, key: str, e: Entry, ts: int) -> Call:
        """A new API response. The one before is held (superseded) until the one after it starts,
        a tick, or the owner closes: a stray line of it may still come."""
        release_superseded(owner, self._outbox)
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
        if e.message_id:
            self._seen_messages.add(digest64(e.message_id))
        self._outbox.open_calls[key] = call
        owner.call_keys.append(key)
        owner.current = call
        owner.calls += 1
        owner.final_seen = False
        return call

    def _forget(self, sess: Session) -> None:
        """Drop a finished session's state; its message keys stay for cross-file dedupe."""
        if all(a.trace_id is not None for a in sess.agents.values()):
            self._sessions.pop(sess.session_id, None)

    def _count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

