"""``ccotel run``'s side of the hooks: it follows the spool ``ccotel hook`` appends to (spool.py), counts
each event once across restarts (the spool's offsets are committed with the counters, as an orchestrator
log's are), and keeps what the spans built later need:

- a tool's permission wait: a ``PermissionRequest`` names the session, the tool and a digest of its input,
  not the call (Claude Code gives the hook no tool_use id). It is paired with the ``execute_tool`` span of
  that session and tool whose time holds the request (the first such request, by time; the input digest
  decides between two calls of one tool when their PostToolUse said it). The wait ends when the user
  answered: the call's ``PostToolUse``/``PostToolUseFailure`` time less its ``duration_ms`` (the tool's own
  run), or the ``PermissionDenied`` time, or else the tool's result (an upper bound: the tool's run is in it).
- a session's end: ``SessionEnd``'s reason goes on the root span of the session's last turn that started
  before the end.

Either goes on a span only when the event was read before the span was built (in a backfill the spool is
read first: always). A permission request read after its tool's span was built is counted in the
histogram only (``recent`` keeps the last tool spans for that); a session end is always counted.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from ccotel.metrics.counters import Metrics, histogram_increments
from ccotel.read.discover import Checkpoint
from ccotel.read.tail import Tailer
from ccotel.records import BadInput, SpanRecord
from ccotel.sources.hooks.spool import PREFIX
from ccotel.spans.attributes import (
    CLAUDE_CODE_SESSION_END_REASON,
    CLAUDE_CODE_TOOL_PERMISSION_DENIED,
    CLAUDE_CODE_TOOL_PERMISSION_WAIT_S,
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    SESSION_ID,
)
from ccotel.store.state import Commit

__all__ = ["HookEvent", "HookSpool", "parse_line"]

log = logging.getLogger("ccotel.hooks")

_MAX_SESSIONS = 10_000  # sessions whose requests and ends are kept (the oldest go first)
_MAX_REQUESTS = 1_000  # permission requests waiting for their span, per session
_MAX_CALLS = 50_000  # PostToolUse / PermissionDenied kept by tool_use id
_RECENT_TOOLS = 5_000  # tool spans built, for a permission request read after its span
_BEFORE_NS = 5_000_000_000  # a request this long before its tool_use's timestamp still pairs (clock skew)
_LABEL_MAX = 64


@dataclass(frozen=True)
class HookEvent:
    """One spool line (spool.record_of wrote it)."""

    t_ns: int
    event: str
    session_id: str
    fields: Mapping[str, object]

    def text(self, key: str) -> str | None:
        value = self.fields.get(key)
        return value if isinstance(value, str) and value else None


def parse_line(data: bytes) -> HookEvent | BadInput:
    """A spool line, or why it is not one (a reason for ccotel_parse_errors)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return BadInput.HOOK_MALFORMED_JSON
    if not isinstance(doc, dict):
        return BadInput.HOOK_NOT_AN_OBJECT
    t, event, sid = doc.get("t"), doc.get("event"), doc.get("session_id")
    if not isinstance(t, int) or isinstance(t, bool) or not isinstance(event, str) or not isinstance(sid, str):
        return BadInput.HOOK_BAD_FIELD
    return HookEvent(t, event, sid, doc)


@dataclass
class _Request:
    t_ns: int
    tool: str
    digest: str | None
    used: bool = False


@dataclass
class _Answer:
    """What a PostToolUse, PostToolUseFailure or PermissionDenied said of one call."""

    t_ns: int  # when the user answered (a PostToolUse's time less the tool's duration)
    digest: str | None
    denied: bool


@dataclass
class _Session:
    requests: list[_Request] = field(default_factory=list)
    ends: list[tuple[int, str]] = field(default_factory=list)  # (time, reason) not on a span yet
    last_turn_start: int = -1  # the latest turn root built


@dataclass
class _File:
    tailer: Tailer
    saved_offset: int


class HookSpool:
    """Follows one spool directory; ``poll`` every tick (and before a backfill reads transcripts),
    ``annotate`` every batch of spans built, ``take_commit`` at every commit."""

    def __init__(self, directory: str, checkpoints: Mapping[str, Checkpoint], metrics: Metrics | None) -> None:
        self.directory = os.path.abspath(directory)
        self.metrics = metrics
        prefix = os.path.join(self.directory, PREFIX)
        self._checkpoints = {p: c for p, c in checkpoints.items() if p.startswith(prefix)}
        self._files: dict[str, _File] = {}
        self._gone: list[str] = [p for p in self._checkpoints if not os.path.lexists(p)]
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._answers: OrderedDict[str, _Answer] = OrderedDict()
        self._recent: deque[tuple[str, str, int, int, str]] = deque(maxlen=_RECENT_TOOLS)
        self.events_read = 0

    # -- reading -------------------------------------------------------------------------------

    def poll(self) -> int:
        """Read the lines appended since the last poll. Returns how many events were read."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.startswith(PREFIX) and n.endswith(".jsonl"))
        except OSError:
            names = []  # no hook has run yet
        listed = {os.path.join(self.directory, n) for n in names}
        for path in [p for p in self._files if p not in listed]:
            del self._files[path]  # pruned by the writer (spool.KEEP_DAYS): its checkpoint goes too
            self._gone.append(path)
        read = 0
        for path in sorted(listed):
            f = self._files.get(path)
            if f is None:
                ckpt = self._checkpoints.pop(path, None)
                tailer = Tailer(path, offset=ckpt[1], identity=ckpt[0], marker=ckpt[3]) if ckpt else Tailer(path)
                f = self._files[path] = _File(tailer, ckpt[1] if ckpt else -1)
            res = f.tailer.read(accept_unterminated=False)
            for line in res.lines:
                found = parse_line(line.data)
                if isinstance(found, BadInput):
                    self._bad(found)
                    continue
                self._take(found)
                read += 1
        self.events_read += read
        return read

    def take_commit(self, commit: Commit) -> None:
        """The spool's offsets (with the counters of the same commit: each event counted once) and
        the files pruned since."""
        for path, f in self._files.items():
            if f.tailer.offset != f.saved_offset:
                f.saved_offset = f.tailer.offset
                commit.offsets[path] = (f.tailer.identity, f.saved_offset, f.saved_offset,
                                        f.tailer.checkpoint_marker())
        if self._gone:
            commit.forget_files += [p for p in self._gone if p not in commit.forget_files]
            self._gone = []

    def _take(self, e: HookEvent) -> None:
        kind = {"SessionEnd": "reason", "Notification": "notification_type", "PreCompact": "trigger",
                "SessionStart": "source"}.get(e.event)
        self._inc("ccotel_hook_events", e.event, _label(e.text(kind) if kind else None, ""))
        if e.event == "SessionEnd":
            reason = _label(e.text("reason"), "unknown")
            self._inc("ccotel_sessions_ended", reason)
            self._session(e.session_id).ends.append((e.t_ns, reason))
        elif e.event == "PermissionRequest":
            self._request(e)
        elif e.event in ("PostToolUse", "PostToolUseFailure", "PermissionDenied"):
            tool_use_id = e.text("tool_use_id")
            if tool_use_id is None:
                return
            denied = e.event == "PermissionDenied"
            ms = e.fields.get("duration_ms")
            ran = int(ms * 1_000_000) if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0 else 0
            self._answers[tool_use_id] = _Answer(e.t_ns - ran, e.text("input_digest"), denied)
            while len(self._answers) > _MAX_CALLS:
                self._answers.popitem(last=False)

    def _request(self, e: HookEvent) -> None:
        tool = e.text("tool_name") or "unknown"
        req = _Request(e.t_ns, tool, e.text("input_digest"))
        for sid, name, start, end, tool_use_id in reversed(self._recent):
            if sid == e.session_id and name == tool and start - _BEFORE_NS <= e.t_ns <= end:
                req.used = True  # its span is built already: the histogram only
                self._observe_wait(tool, self._wait_end(tool_use_id, end) - e.t_ns)
                return
        requests = self._session(e.session_id).requests
        requests.append(req)
        if len(requests) > _MAX_REQUESTS:
            del requests[: len(requests) - _MAX_REQUESTS]  # the oldest: their spans were built long ago

    # -- spans -----------------------------------------------------------------------------------

    def annotate(self, spans: Sequence[SpanRecord]) -> None:
        """Put what the hooks said on the spans of one batch, before they are counted and sent."""
        roots: dict[str, list[SpanRecord]] = {}
        for s in spans:
            a = s.attributes
            op = a.get(GEN_AI_OPERATION_NAME)
            sid = a.get(SESSION_ID)
            if not isinstance(sid, str):
                continue
            if op == "execute_tool":
                self._tool(s, sid)
            elif op == "invoke_agent" and s.parent_span_id is None and a.get(GEN_AI_AGENT_NAME) == "claude-code":
                roots.setdefault(sid, []).append(s)
        for sid, turns in roots.items():
            self._turns(sid, turns)

    def _tool(self, s: SpanRecord, sid: str) -> None:
        a = s.attributes
        tool, tool_use_id = str(a.get(GEN_AI_TOOL_NAME, "unknown")), str(a.get(GEN_AI_TOOL_CALL_ID, ""))
        answer = self._answers.get(tool_use_id)
        if answer is not None and answer.denied:
            a[CLAUDE_CODE_TOOL_PERMISSION_DENIED] = True
        sess = self._sessions.get(sid)
        req = self._match(sess, s, tool, answer) if sess is not None else None
        if req is None:
            self._recent.append((sid, tool, s.start_ns, s.end_ns, tool_use_id))
            return
        req.used = True
        a[CLAUDE_CODE_TOOL_PERMISSION_WAIT_S] = round(max(self._wait_end(tool_use_id, s.end_ns) - req.t_ns, 0) / 1e9, 3)

    @staticmethod
    def _match(sess: _Session, s: SpanRecord, tool: str, answer: _Answer | None) -> _Request | None:
        found = [r for r in sess.requests if not r.used and r.tool == tool
                 and s.start_ns - _BEFORE_NS <= r.t_ns <= s.end_ns]
        if answer is not None and answer.digest is not None:
            same = [r for r in found if r.digest == answer.digest]
            found = same or found
        if not found:
            return None
        sess.requests = [r for r in sess.requests if not r.used]  # the used ones are done with
        return min(found, key=lambda r: r.t_ns)

    def _wait_end(self, tool_use_id: str, result_ns: int) -> int:
        answer = self._answers.get(tool_use_id)
        return min(answer.t_ns, result_ns) if answer is not None else result_ns

    def _turns(self, sid: str, turns: list[SpanRecord]) -> None:
        sess = self._sessions.get(sid)
        latest = max(t.start_ns for t in turns)
        if sess is None:
            return
        kept = []
        for t_ns, reason in sess.ends:
            before = [t for t in turns if sess.last_turn_start < t.start_ns <= t_ns]
            if before:
                max(before, key=lambda t: t.start_ns).attributes[CLAUDE_CODE_SESSION_END_REASON] = reason
            elif t_ns >= latest:
                kept.append((t_ns, reason))  # its turn is not built yet
        sess.ends = kept
        sess.last_turn_start = max(sess.last_turn_start, latest)

    # -- bookkeeping -----------------------------------------------------------------------------

    def _session(self, sid: str) -> _Session:
        sess = self._sessions.get(sid)
        if sess is None:
            sess = self._sessions[sid] = _Session()
            while len(self._sessions) > _MAX_SESSIONS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(sid)
        return sess

    def _observe_wait(self, tool: str, wait_ns: int) -> None:
        if self.metrics is not None:
            self.metrics.inc_many(histogram_increments("ccotel_permission_wait_seconds", _label(tool, "unknown"),
                                                       max(wait_ns, 0) / 1e9))

    def _inc(self, name: str, *labels: str) -> None:
        if self.metrics is not None:
            self.metrics.inc(name, *labels)

    def _bad(self, reason: BadInput) -> None:
        log.debug("hook spool %s: %s", self.directory, reason)
        self._inc("ccotel_parse_errors", reason)


def _label(value: str | None, default: str) -> str:
    return (value or default)[:_LABEL_MAX]


