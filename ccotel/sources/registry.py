"""An orchestrator's agent registry (``ccotel run --registry DIR``): the agents it started, as spans
and metrics, and the ones whose process died while they were still at work.

What the orchestrator writes (DESIGN.md section 1):
- ``DIR/.active-pids.json``: ``{agentId: {pid, depth, parentId, agentType}}``, an entry written with
  ``pid: null`` before the spawn and updated after; entries are never removed.
- ``DIR/agent-responses/<agentId>.md``: YAML-like front matter (``Task``, ``Instructions``,
  ``Started``, ``Status: in-progress|done|failed``, ``Depth``, ``ParentAgent``, ``Ended``) between
  ``---`` lines, then the agent's output, appended while it runs.

Both files are rewritten in place: a read can see half a JSON document or a front matter without
its closing line. That is normal: it is counted by reason (``ccotel_registry_bad_input``), the last
good reading is kept, and the file is read again on its next change (and once more at the next
poll, for a writer that finished within the file system's timestamp granularity).

An agent is judged once it is over: ``done`` or ``failed`` from its front matter, or ``killed``
when its pid is gone, or taken by another process (the start time says so), while its Status
still says in-progress, for ``kill_grace_ns`` (the orchestrator writes the final Status just after
its child exits). Each judged agent is one ``invoke_agent {agentType}`` span, in one trace per root
agent, parented by ``parentId``, and counted once, across restarts: the state keeps a mark per
agent (``take_commit``), anchored to its ``.md`` file, so the mark goes when the file goes.
Agents already over when ccotel first sees a registry are history: they get their spans but are
not counted (as transcripts read on a first start, pipeline.py).

The Claude Code session an agent ran is found by its process: ``<root>/sessions/<pid>.json`` of
the agent's pid or of a process below it (a wrapper), with the same process start time; or, once
the process is gone, a file left behind by a killed one (same pid, started while the agent ran).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ccotel.assemble import ids
from ccotel.read.parse import parse_line
from ccotel.read.parse_time import parse_timestamp
from ccotel.read.procs import pid_alive
from ccotel.records import SpanKind, SpanRecord, StatusCode
from ccotel.rules import transcript as rules
from ccotel.store.state import anchor_of

__all__ = ["Registry", "AgentEntry", "FrontMatter", "Outcome", "SessionLink", "parse_active_pids",
           "parse_front_matter", "proc_start", "first_turn", "add_arguments", "ACTIVE_PIDS", "RESPONSES",
           "METRIC_NAMES"]

log = logging.getLogger("ccotel.registry")

ACTIVE_PIDS = ".active-pids.json"
RESPONSES = "agent-responses"

# The series this module counts (metrics.py declares them: see METRICS there).
AGENTS = "ccotel_registry_agents"
AGENT_SECONDS = "ccotel_registry_agent_seconds"
KILLED = "ccotel_registry_killed_agents"
BAD_INPUT = "ccotel_registry_bad_input"
METRIC_NAMES = (AGENTS, AGENT_SECONDS, KILLED, BAD_INPUT)

_HEAD_BYTES = 64 << 10  # front matter longer than this is not front matter
_JSON_BYTES = 64 << 20  # an .active-pids.json larger than this is not read
_CHECK_EVERY_NS = 1_000_000_000  # processes and sessions files are looked at once a second at most
_SPAWN_SLACK_NS = 60_000_000_000  # a process started this long after the agent's Started is another one
_RESEND_AFTER_NS = 5_000_000_000  # spans the trace queue refused are offered again after this long
_MAX_TRANSCRIPT_BYTES = 8 << 20  # read this much of a session's transcript for the agent's first prompt


class Counter(Protocol):
    """What the registry needs of ccotel.metrics.Metrics."""

    def inc(self, name: str, *labels: str, value: float = 1.0, channel: str = "read") -> None: ...


class Outcome:
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"


@dataclass(frozen=True)
class AgentEntry:
    """One entry of ``.active-pids.json``."""

    agent_id: str
    pid: int | None
    depth: int | None
    parent_id: str | None
    agent_type: str | None


@dataclass(frozen=True)
class FrontMatter:
    """The front matter of ``agent-responses/<agentId>.md``. Instructions are read past, never kept
    (prompt text holds secrets; spans carry no content)."""

    status: str | None  # in-progress | done | failed (lower case); None: not written yet
    task: str | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    depth: int | None = None
    parent: str | None = None


@dataclass(frozen=True)
class SessionLink:
    """The Claude Code session an agent ran, and how it was found."""

    session_id: str
    how: str  # process (its live sessions/<pid>.json) | left_behind (a killed process's file)
    root: str


# -- parsing (pure) ---------------------------------------------------------------------------


def parse_active_pids(data: bytes) -> tuple[dict[str, AgentEntry], list[str]]:
    """The entries of ``.active-pids.json`` and what was wrong (reasons). A document that does not
    parse gives no entries and one reason: the caller keeps its last good reading."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}, ["malformed_json" if data.strip() else "empty_file"]
    if not isinstance(doc, dict):
        return {}, ["not_an_object"]
    out: dict[str, AgentEntry] = {}
    errors: list[str] = []
    for agent_id, v in doc.items():
        if not isinstance(v, dict) or not agent_id:
            errors.append("bad_entry")
            continue
        pid = v.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            errors.append("bad_pid")
            pid = None
        out[agent_id] = AgentEntry(agent_id, pid, _int(v.get("depth")), _text(v.get("parentId")),
                                   _text(v.get("agentType")))
    return out, errors


def parse_front_matter(head: bytes) -> FrontMatter | str:
    """The front matter at the start of an agent's ``.md``, or why there is none (a reason):
    ``no_front_matter``, ``partial_front_matter`` (no closing ``---`` yet: mid-write),
    ``front_matter_too_long``, ``invalid_utf8``. Lenient where YAML is strict: ``Key: value`` lines
    at the left margin, anything else continues the value before (multi-line Instructions)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:
            return "invalid_utf8"
        text = head[: exc.start].decode("utf-8")  # a character cut by the read limit or mid-write
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return "no_front_matter"
    fields: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:-1] if len(lines) > 1 else []:
        if line.strip() == "---":
            return _front_matter(fields)
        name, sep, value = line.partition(":")
        if sep and name and not name[0].isspace() and name.replace("-", "").replace("_", "").isalnum():
            key = name.strip().lower()
            fields[key] = value.strip()
        elif key is not None:
            fields[key] = (fields[key] + "\n" + line.strip()).strip()
    # The last element may be a line still being written: never taken as the closing one.
    return "front_matter_too_long" if len(head) >= _HEAD_BYTES else "partial_front_matter"


def _front_matter(fields: dict[str, str]) -> FrontMatter:
    status = _unquote(fields.get("status", "")).lower() or None
    return FrontMatter(
        status=status,
        task=_unquote(fields.get("task", "")) or None,
        started_ns=_time(fields.get("started")),
        ended_ns=_time(fields.get("ended")),
        depth=_int(_unquote(fields.get("depth", ""))),
        parent=_parent(fields.get("parentagent")),
    )


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def _parent(v: str | None) -> str | None:
    v = _unquote(v or "")
    return None if v.lower() in ("", "null", "none", "~", "-") else v


def _time(v: str | None) -> int | None:
    """ISO-8601 (as Claude Code writes it, or with an offset), or Unix seconds / milliseconds."""
    v = _unquote(v or "")
    if not v or v.lower() in ("null", "none", "~"):
        return None
    if v.replace(".", "", 1).isdigit():
        num = float(v)
        return int(num * 1e6) if num > 1e11 else int(num * 1e9)  # milliseconds past 1973, or seconds
    return parse_timestamp(v.replace(" ", "T", 1) if len(v) > 10 and v[10] == " " else v)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


# -- processes -----------------------------------------------------------------------------------


def proc_start(pid: int) -> str | None:
    """/proc/<pid>/stat field 22 (start time in clock ticks since boot), as Claude Code's
    ``procStart`` writes it; None if the pid does not run."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None and len(fields) > 1 and fields[1].isdigit() else None


def _start_wall_ns(start_ticks: str) -> int | None:
    """A process start time (clock ticks since boot) as Unix ns."""
    try:
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return int((btime + int(start_ticks) / os.sysconf("SC_CLK_TCK")) * 1e9)
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _below(pid: int, ancestor: int, depth: int = 8) -> bool:
    """Is ``pid`` ``ancestor`` or a process started under it (a wrapper's child)?"""
    for _ in range(depth):
        if pid == ancestor:
            return True
        parent = _parent_pid(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


def _sessions_files(roots: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(root, document) of every ``<root>/sessions/<pid>.json``."""
    out = []
    for root in roots:
        d = os.path.join(root, "sessions")
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".json"))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(d, name), "rb") as f:
                    doc = orjson.loads(f.read(1 << 16))
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("pid"), int) and isinstance(doc.get("sessionId"), str):
                out.append((root, doc))
    return out


def first_turn(roots: tuple[str, ...], session_id: str, since_ns: int | None) -> tuple[int, int] | None:
    """(trace id, span id) of the first turn of ``session_id`` started at ``since_ns`` or later,
    as the transcript path builds them (assemble.py: a prompt's turn), from its main transcript."""
    for root in roots:
        projects = os.path.join(root, "projects")
        try:
            dirs = sorted(os.listdir(projects))
        except OSError:
            continue
        for d in dirs:
            path = os.path.join(projects, d, session_id + ".jsonl")
            if os.path.isfile(path):
                return _first_prompt(path, session_id, since_ns)
    return None


def _first_prompt(path: str, session_id: str, since_ns: int | None) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_TRANSCRIPT_BYTES)
    except OSError:
        return None
    offset = 0
    for line in data.split(b"\n"):
        for e in parse_line(line, offset).entries:
            if e.type != "user" or e.is_sidechain or not e.uuid or rules.classify_user(e) != "prompt":
                continue
            if since_ns is not None and e.timestamp_ns is not None and e.timestamp_ns < since_ns - _SPAWN_SLACK_NS:
                continue  # a turn of the session from before this agent (a resume)
            return ids.trace_id(session_id, e.uuid), ids.span_id("turn", session_id, e.uuid)
        offset += len(line) + 1
    return None


# -- the follower ----------------------------------------------------------------------------------


@dataclass
class _Agent:
    """What is known of one agent (mutable: the follower's own bookkeeping)."""

    agent_id: str
    md_path: str
    entry: AgentEntry | None = None
    front: FrontMatter | None = None
    md_sig: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of the last read
    md_retry: bool = False  # the last read was bad: read again at the next poll
    md_mtime_ns: int = 0
    pid_start: str | None = None  # the pid's start time, as first seen running
    gone_since_ns: int | None = None  # its process was first seen gone (or another) then
    session: SessionLink | None = None
    judged: str | None = None  # the outcome, once judged
    sent: bool = False  # its span is final (delivered or dropped by the backend)
    in_flight: bool = False
    resend_at_ns: int = 0


class Registry:
    """Follows one registry directory; ``poll`` is called every tick of the run loop.

    ``marks``: the state's marks (``State.marks()``); ``take_commit`` returns the marks to commit
    with the next checkpoint (in the same transaction as the counters: that is what makes "once"
    hold across restarts) and the ``.md`` paths that are gone (``Commit.forget_files``: their
    marks go with them). ``acknowledge`` (any thread) is told of spans the backend took;
    ``unsent`` of spans the trace queue refused."""

    def __init__(self, directory: str, roots: tuple[str, ...], metrics: Counter | None, marks: set[str],
                 clock: Callable[[], int] = time.time_ns, kill_grace_ns: int = 5_000_000_000) -> None:
        self.directory = os.path.abspath(directory)
        self.roots = roots
        self.metrics = metrics
        self.clock = clock
        self.kill_grace_ns = kill_grace_ns
        self.pids_path = os.path.join(self.directory, ACTIVE_PIDS)
        self.responses = os.path.join(self.directory, RESPONSES)
        self._seen_mark = f"registry:seen:{self.directory}"
        self._marks = {m for m in marks if m.startswith("registry:")}
        self.first_sighting = self._seen_mark not in self._marks
        # A registry never seen before: what was over before now is history (traced, not counted).
        self._watch_start_ns: int | None = clock() if self.first_sighting else None
        self._first_check_ns: int | None = None
        self.entries: dict[str, AgentEntry] = {}
        self.agents: dict[str, _Agent] = {}
        self._pids_sig: tuple[int, int, int] | None = None
        self._pids_retry = False
        self._dir_sig: tuple[int, int] | None = None
        self._relist = False  # list the directory once more after a change (see _scan_responses)
        self._present: set[str] = set()  # agent ids with an .md file, as last listed
        self._new_marks: list[tuple[str, int]] = []
        self._gone: list[str] = []
        self._in_flight: dict[int, str] = {}  # span id -> agent id
        self._lock = threading.RLock()  # acknowledge runs on the export thread (and marks)
        self._checked_ns = 0
        self._forget_marks_of_deleted_files()

    # -- the run loop's side ---------------------------------------------------------------------

    def poll(self, now: int | None = None) -> list[SpanRecord]:
        """Read what changed, judge the agents that are over; the spans to emit."""
        now = self.clock() if now is None else now
        self._read_pids()
        self._scan_responses()
        for agent_id in self._present:
            agent = self.agents[agent_id]
            if not self._settled(agent):
                self._read_md(agent)
        if now - self._checked_ns >= _CHECK_EVERY_NS:
            self._checked_ns = now
            if self._first_check_ns is None:
                self._first_check_ns = now
            self._check_processes(now)
        return self._judge(now)

    def take_commit(self) -> tuple[list[tuple[str, int]], list[str]]:
        """(marks to commit, ``.md`` paths gone): for ``Commit.marks`` and ``Commit.forget_files``."""
        with self._lock:
            marks, self._new_marks = self._new_marks, []
        gone, self._gone = self._gone, []
        return marks, gone

    def acknowledge(self, spans: Sequence[SpanRecord]) -> int:
        """These spans are final (the backend took them or dropped them for good): not sent again.
        Returns how many of them were this registry's (counted with the batch's export result)."""
        own = 0
        with self._lock:
            for span in spans:
                agent_id = self._in_flight.pop(span.span_id, None)
                if agent_id is not None:
                    own += 1
                agent = self.agents.get(agent_id) if agent_id is not None else None
                if agent is None:
                    continue
                agent.in_flight, agent.sent = False, True
                self._mark(f"registry:sent:{agent.md_path}", agent.md_path)
        return own

    def unsent(self, spans: Iterable[SpanRecord], now: int | None = None) -> None:
        """The trace queue did not take these (the backend is away): offered again later."""
        now = self.clock() if now is None else now
        with self._lock:
            for span in spans:
                agent_id = self._in_flight.pop(span.span_id, None)
                agent = self.agents.get(agent_id) if agent_id is not None else None
                if agent is not None:
                    agent.in_flight, agent.resend_at_ns = False, now + _RESEND_AFTER_NS

    def gauges(self) -> dict[str, float]:
        running = sum(1 for a in list(self.agents.values())
                      if a.judged is None and a.front is not None and a.front.status == "in-progress")
        return {"ccotel_registry_agents_in_progress": float(running)}

    # -- reading ---------------------------------------------------------------------------------

    def _read_pids(self) -> None:
        sig = _sig(self.pids_path)
        if sig is None or (sig == self._pids_sig and not self._pids_retry):
            return
        retry_same = sig == self._pids_sig
        self._pids_sig = sig
        try:
            with open(self.pids_path, "rb") as f:
                data = f.read(_JSON_BYTES + 1)
        except OSError:
            self._bad("unreadable", once=retry_same)
            self._pids_retry = not retry_same
            return
        entries: dict[str, AgentEntry] = {}
        errors = ["too_large"]
        if len(data) <= _JSON_BYTES:
            entries, errors = parse_active_pids(data)
        whole = not entries and bool(errors)
        for reason in errors:
            self._bad(reason, once=retry_same)
        # A bad read is tried once more at the next poll (a writer mid-write, within the
        # timestamp granularity), then waits for the next change.
        self._pids_retry = whole and not retry_same
        if whole:
            return
        self.entries = entries
        for agent_id, entry in entries.items():
            self._agent(agent_id).entry = entry
        if self.first_sighting:
            self._mark(self._seen_mark, self.pids_path)

    def _scan_responses(self) -> None:
        """New .md files (the directory changed), and files that are gone. Listed once more at the
        poll after a change: a file created within the same tick of the file system's clock as the
        listing leaves the directory's mtime as it was. Only listed files are looked at: the
        registry keeps entries whose .md is long gone."""
        sig = _dir_sig(self.responses)
        if sig is None or (sig == self._dir_sig and not self._relist):
            return
        self._relist = sig != self._dir_sig
        self._dir_sig = sig
        try:
            names = os.listdir(self.responses)
        except OSError:
            return
        present = {n[:-3] for n in names if n.endswith(".md") and len(n) > 3}
        self._present = present
        for agent_id in sorted(present):
            self._agent(agent_id)
        for agent_id, agent in list(self.agents.items()):
            if agent_id not in present and agent.md_sig is not None and not os.path.lexists(agent.md_path):
                self._forget(agent)

    def _agent(self, agent_id: str) -> _Agent:
        agent = self.agents.get(agent_id)
        if agent is None:
            md_path = os.path.join(self.responses, os.path.basename(agent_id) + ".md")
            agent = self.agents[agent_id] = _Agent(agent_id, md_path)
            if f"registry:judged:{md_path}" in self._marks:
                agent.judged = "before"  # judged in an earlier run; its span may still be owed
            agent.sent = f"registry:sent:{md_path}" in self._marks
        return agent

    def _settled(self, agent: _Agent) -> bool:
        return agent.judged is not None and agent.sent

    def _read_md(self, agent: _Agent) -> None:
        sig = _sig(agent.md_path)
        if sig is None or (sig == agent.md_sig and not agent.md_retry):
            return
        retry_same = sig == agent.md_sig
        agent.md_sig, agent.md_mtime_ns = sig, sig[2]
        try:
            with open(agent.md_path, "rb") as f:
                head = f.read(_HEAD_BYTES)
        except OSError:
            self._bad("unreadable", once=retry_same)
            agent.md_retry = not retry_same
            return
        found = parse_front_matter(head)
        if isinstance(found, str):
            self._bad(found, once=retry_same)
            agent.md_retry = not retry_same
            return
        agent.md_retry = False
        if found.status not in (None, "in-progress", Outcome.DONE, Outcome.FAILED):
            self._bad("unknown_status", once=retry_same)
        if found.status is not None and found.started_ns is None:
            self._bad("bad_timestamp", once=retry_same)
        agent.front = found
        if found.status != "in-progress":
            agent.gone_since_ns = None

    # -- judging ---------------------------------------------------------------------------------

    def _check_processes(self, now: int) -> None:
        """Processes of agents at work: still running, the same process? Their sessions, while
        the sessions files are there (a clean exit removes them)."""
        files: list[tuple[str, dict[str, Any]]] | None = None
        for agent in self.agents.values():
            entry, front = agent.entry, agent.front
            if self._settled(agent) or agent.in_flight or entry is None or entry.pid is None or front is None:
                continue
            if front.status != "in-progress":
                continue
            if self._same_process(agent, entry.pid, front.started_ns):
                agent.gone_since_ns = None
                if agent.session is None or agent.session.how != "process":
                    files = _sessions_files(self.roots) if files is None else files
                    agent.session = self._live_session(agent, entry.pid, files) or agent.session
            elif agent.gone_since_ns is None:
                agent.gone_since_ns = now
                if agent.session is None:
                    files = _sessions_files(self.roots) if files is None else files
                    agent.session = self._left_behind(agent, entry.pid, files, now)

    def _same_process(self, agent: _Agent, pid: int, started_ns: int | None) -> bool:
        if agent.pid_start is not None:
            return pid_alive(pid, agent.pid_start)  # the process first seen under this pid
        start = proc_start(pid)
        if start is None or not pid_alive(pid, start):
            return False
        wall = _start_wall_ns(start)
        if started_ns is not None and wall is not None and wall > started_ns + _SPAWN_SLACK_NS:
            return False  # started well after the agent: the pid was reused after its process died
        agent.pid_start = start
        return True

    def _live_session(self, agent: _Agent, pid: int, files: list[tuple[str, dict[str, Any]]]) -> SessionLink | None:
        for root, doc in files:
            spid, start = doc["pid"], doc.get("procStart")
            if not pid_alive(spid, str(start) if start is not None else None):
                continue
            if _below(spid, pid):
                return SessionLink(doc["sessionId"], "process", root)
        return None

    def _left_behind(self, agent: _Agent, pid: int, files: list[tuple[str, dict[str, Any]]],
                     now: int) -> SessionLink | None:
        """A SIGKILLed Claude Code leaves its sessions/<pid>.json: the agent's pid, started while
        the agent ran (and, if seen running, with its start time)."""
        started = agent.front.started_ns if agent.front is not None else None
        for root, doc in files:
            if doc["pid"] != pid:
                continue
            start = doc.get("procStart")
            if agent.pid_start is not None and str(start) != agent.pid_start:
                continue
            at = doc.get("startedAt")
            at_ns = int(at) * 1_000_000 if isinstance(at, (int, float)) else None
            if started is not None and (at_ns is None or not started - _SPAWN_SLACK_NS <= at_ns <= now):
                continue
            return SessionLink(doc["sessionId"], "left_behind", root)
        return None

    def _judge(self, now: int) -> list[SpanRecord]:
        spans = []
        for agent in self.agents.values():
            if self._settled(agent) or agent.in_flight or agent.front is None:
                continue
            outcome = self._outcome(agent, now)
            if outcome is None:
                continue
            if agent.judged is None:
                agent.judged = outcome
                self._count(agent, outcome, now)
            if agent.sent or now < agent.resend_at_ns:
                continue
            span = self._span(agent, outcome, now)
            with self._lock:
                agent.in_flight = True
                self._in_flight[span.span_id] = agent.agent_id
            spans.append(span)
        return spans

    def _outcome(self, agent: _Agent, now: int) -> str | None:
        front = agent.front
        assert front is not None
        if front.status in (Outcome.DONE, Outcome.FAILED):
            return front.status
        if front.status == "in-progress" and agent.gone_since_ns is not None \
                and now - agent.gone_since_ns >= self.kill_grace_ns:
            return Outcome.KILLED
        return None

    def _count(self, agent: _Agent, outcome: str, now: int) -> None:
        """Once per agent: the mark is committed with the counters, in one transaction."""
        if not self._mark(f"registry:judged:{agent.md_path}", agent.md_path):
            return  # counted (or seen as history) in an earlier run
        if self.metrics is None or self._history(agent, outcome):
            return  # over before ccotel watched: history, traced but not counted
        type_, depth = self._type(agent), _depth_label(self._depth(agent))
        self.metrics.inc(AGENTS, type_, outcome, depth)
        start, end = self._times(agent, now)
        self.metrics.inc(AGENT_SECONDS, type_, outcome, depth, value=max(end - start, 0) / 1e9)
        if outcome == Outcome.KILLED:
            self.metrics.inc(KILLED)  # unlabelled: exposed at 0 from the start, for an alert's increase()

    def _history(self, agent: _Agent, outcome: str) -> bool:
        """Over before ccotel first watched this registry: gone at the first look at the processes,
        or ended before."""
        if self._watch_start_ns is None:
            return False
        if outcome == Outcome.KILLED:
            return agent.gone_since_ns is not None and agent.gone_since_ns == self._first_check_ns
        return self._times(agent, self._watch_start_ns)[1] < self._watch_start_ns

    # -- spans -----------------------------------------------------------------------------------

    def _span(self, agent: _Agent, outcome: str, now: int) -> SpanRecord:
        front = agent.front
        assert front is not None
        agent_type = self._type(agent)
        parent = self._parent(agent)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_type,
            "claude_code.registry.agent_id": agent.agent_id,
            "claude_code.registry.outcome": outcome,
            "claude_code.registry.dir": self.directory,
        }
        depth = self._depth(agent)
        if depth is not None:
            attrs["claude_code.registry.depth"] = depth
        if parent is not None:
            attrs["claude_code.registry.parent_id"] = parent
        if agent.entry is not None and agent.entry.pid is not None:
            attrs["claude_code.registry.pid"] = agent.entry.pid
        if front.task:
            attrs["gen_ai.agent.description"] = front.task
        link = agent.session
        if link is not None:
            attrs["session.id"] = attrs["gen_ai.conversation.id"] = link.session_id
            attrs["claude_code.registry.session_link"] = link.how
            turn = first_turn((link.root,), link.session_id, front.started_ns)
            if turn is not None:
                # The session's first turn of this agent (its trace is the transcript path's):
                # where a span link would point (SpanRecord carries no links yet).
                attrs["claude_code.registry.session_trace_id"] = f"{turn[0]:032x}"
                attrs["claude_code.registry.session_span_id"] = f"{turn[1]:016x}"
        else:
            attrs["claude_code.registry.session_link"] = "none"
        start, end = self._times(agent, now)
        error = outcome in (Outcome.FAILED, Outcome.KILLED)
        if error:
            attrs["error.type"] = outcome
        return SpanRecord(
            trace_id=ids.trace_id("registry", self._root_of(agent.agent_id)),
            span_id=ids.span_id("registry", agent.agent_id),
            parent_span_id=ids.span_id("registry", parent) if parent is not None else None,
            name=f"invoke_agent {agent_type}", kind=SpanKind.INTERNAL, start_ns=start, end_ns=max(end, start),
            attributes=attrs, status=StatusCode.ERROR if error else StatusCode.UNSET,
            status_message=outcome if error else None,
        )

    def _times(self, agent: _Agent, now: int) -> tuple[int, int]:
        """Started to Ended; a killed agent (no Ended) ends at its output's last change."""
        front = agent.front
        started = front.started_ns if front is not None else None
        ended = front.ended_ns if front is not None else None
        start = started if started is not None else agent.md_mtime_ns or now
        end = ended if ended is not None else min(max(agent.md_mtime_ns, start), now)
        return start, end

    def _type(self, agent: _Agent) -> str:
        return (agent.entry.agent_type if agent.entry is not None else None) or "agent"

    def _depth(self, agent: _Agent) -> int | None:
        if agent.entry is not None and agent.entry.depth is not None:
            return agent.entry.depth
        return agent.front.depth if agent.front is not None else None

    def _parent(self, agent: _Agent) -> str | None:
        if agent.entry is not None and agent.entry.parent_id is not None:
            return agent.entry.parent_id
        return agent.front.parent if agent.front is not None else None

    def _root_of(self, agent_id: str) -> str:
        """The agent at the top of this one's parents: its trace. (A parent is written to the
        registry before its children are spawned, so the chain is known when a child is judged.)"""
        seen = {agent_id}
        while True:
            agent = self.agents.get(agent_id)
            parent = self._parent(agent) if agent is not None else None
            if parent is None or parent in seen:
                return agent_id
            seen.add(parent)
            agent_id = parent

    # -- marks and bad input ---------------------------------------------------------------------

    def _mark(self, mark: str, anchor_path: str) -> bool:
        with self._lock:
            if mark in self._marks:
                return False
            self._marks.add(mark)
            self._new_marks.append((mark, anchor_of(anchor_path)))
            return True

    def _forget(self, agent: _Agent) -> None:
        """Its .md is gone: so are its marks (the state drops them with the file)."""
        del self.agents[agent.agent_id]
        self._present.discard(agent.agent_id)
        self._gone.append(agent.md_path)
        with self._lock:
            self._marks.discard(f"registry:judged:{agent.md_path}")
            self._marks.discard(f"registry:sent:{agent.md_path}")

    def _forget_marks_of_deleted_files(self) -> None:
        """Marks of .md files deleted while ccotel did not run (only if the directory is there:
        an unmounted registry is not a deletion)."""
        if not os.path.isdir(self.responses):
            return
        prefix = os.path.join(self.responses, "")
        for mark in sorted(self._marks):
            kind, _, path = mark[len("registry:"):].partition(":")
            if kind in ("judged", "sent") and path.startswith(prefix) and not os.path.lexists(path):
                self._marks.discard(mark)
                if path not in self._gone:
                    self._gone.append(path)

    def _bad(self, reason: str, once: bool) -> None:
        """Bad input, counted once per state of the file (not at every retry)."""
        if once:
            return
        log.debug("registry %s: %s", self.directory, reason)
        if self.metrics is not None:
            self.metrics.inc(BAD_INPUT, reason)


def _sig(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _dir_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _depth_label(depth: int | None) -> str:
    """Bounded label values: 0-9, then 10+."""
    if depth is None:
        return "unknown"
    return str(depth) if 0 <= depth < 10 else "10+"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel run``'s registry options."""
    parser.add_argument("--registry", action="append", default=[], metavar="DIR",
                        help="an orchestrator's agent registry to follow (.active-pids.json and "
                             "agent-responses/<agentId>.md): agent spans, agents by outcome, killed agents "
                             "(repeatable)")
    parser.add_argument("--registry-kill-grace", type=float, default=5.0, metavar="SECONDS",
                        help="how long an agent's process must be gone while its Status still says "
                             "in-progress before it counts as killed")
