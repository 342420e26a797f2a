"""Which transcript entry a Claude Agent SDK message came from (used by ccotel/sdk.py).

The SDK (``claude-agent-sdk``) reads the CLI's stream-json; the CLI writes the same messages into
its transcript with what the stream lacks (parentUuid, timestamp, isSidechain, agentId, the final
usage, toolUseResult). Each stream message is matched to its transcript line:

* by uuid: the CLI gives a stream record the uuid of its transcript line (seen in 2.1.197, 2.1.330
  and 2.1.332);
* otherwise by a content signature of its first block: ``tool_use:{id}``, ``tool_result:{id}``,
  or ``text:``/``thinking:`` plus a hash of its first 200 normalised characters, within the same
  agent context (the main file, or the subagent file the message's ``parent_tool_use_id`` leads
  to through meta.json's ``toolUseId`` or the spawning call's ``toolUseResult.agentId``).

Only lines written after the observer started can match: a resumed session's earlier lines, or a
synced copy of them read from offset 0, are history (before the file's size at the start, or
older than the start), never taken for a new message. Lines read but not claimed yet wait in a
queue bounded by count and bytes (most never are: attachments, subagent text the SDK does not forward); the oldest
are let go when it is full, and counted. The wait for a line not flushed yet is the caller's
(sdk.py retries ``take`` for a bounded time).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ccotel.hashing import blake2b
from ccotel.read.discover import within_root
from ccotel.read.layout import agent_transcript, main_transcripts, subagents_dir
from ccotel.read.parse_time import parse_timestamp
from ccotel.read.regular import open_regular
from ccotel.read.tail import Tailer

__all__ = [
    "MatchStats",
    "Matcher",
    "SessionFiles",
    "Wanted",
    "block_signature",
    "content_signature",
    "normalise",
]

RawEntry = dict[str, Any]

SIGNATURE_CHARS = 200
_SPACE = re.compile(r"\s+")
_SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
_AGENT_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")
# Line types an SDK message can come from; attachments, api-request lines and the like never do.
_MATCHABLE = frozenset({"user", "assistant", "system"})


def normalise(text: str) -> str:
    """NFC, runs of whitespace as one space, no leading or trailing space: the stream and the
    transcript may differ in nothing else that matters for a signature."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def _text_signature(kind: str, text: str) -> str:
    head = normalise(text)[:SIGNATURE_CHARS]
    return f"{kind}:{blake2b(head.encode('utf-8', 'replace'), digest_size=8).hexdigest()}"


def block_signature(kind: str, block_id: str | None, text: str | None) -> str | None:
    """The signature of one content block given its type, id (tool_use id, or the tool_use_id a
    result answers) and text (text or thinking)."""
    # server tools too: server_tool_use, and results such as advisor_tool_result or
    # web_search_tool_result (the SDK has one ServerToolResultBlock for all of them)
    if kind.endswith("tool_use") and block_id:
        return f"tool_use:{block_id}"
    if kind.endswith("_result") and block_id:
        return f"tool_result:{block_id}"
    if kind in ("text", "thinking") and text is not None:
        return _text_signature(kind, text)
    return None


def content_signature(content: Any) -> str | None:
    """The signature of a transcript line's ``message.content`` (a string or a list of blocks)."""
    if isinstance(content, str):
        return _text_signature("text", content)
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return None
    block = content[0]
    kind = str(block.get("type"))
    block_id = block.get("id") if kind.endswith("tool_use") else block.get("tool_use_id")
    if isinstance(block.get("tool_use_id"), str) and not kind.endswith("_result"):
        kind = "tool_result"  # a result block of a type not seen yet: its id still says what it answers
    text = block.get("thinking") if kind == "thinking" else block.get("text")
    return block_signature(kind, block_id if isinstance(block_id, str) else None,
                           text if isinstance(text, str) else None)


@dataclass(frozen=True)
class Wanted:
    """What an SDK message says about the line it came from."""

    kind: str  # transcript line type: "assistant", "user" or "system"
    uuid: str | None
    signature: str | None
    parent_tool_use_id: str | None  # set for a subagent's messages: the Agent tool_use that spawned it


@dataclass
class MatchStats:
    """How messages were matched (read by tests and by users who want to know)."""

    by_uuid: int = 0
    by_signature: int = 0
    after_retry: int = 0  # matched only after waiting for the line to be flushed
    unmatched: int = 0  # messages that expected a line and got none within the wait
    history_skipped: int = 0  # lines written before the start (a resumed or synced session)
    evicted: int = 0  # unclaimed lines let go because the queue was full
    bad_lines: int = 0
    queued: int = 0  # lines waiting now


@dataclass
class _Held:
    entry: RawEntry
    kind: str
    agent_id: str | None  # None: the main conversation
    signature: str | None
    size: int  # bytes of its line: a tool result can hold megabytes


class SessionFiles:
    """Where one session's files are: ``<root>/projects/<project>/<session>.jsonl``, its
    ``<session>/subagents/agent-<id>.jsonl`` files and their ``.meta.json``. The project
    directory is looked for until the main file is found (its name is the cwd, mangled in ways
    that changed between versions: looked for, not computed)."""

    def __init__(self, roots: Sequence[str], session_id: str) -> None:
        self.roots = tuple(roots)
        self.session_id = session_id
        self._main: tuple[str, str] | None = None  # (root, path)

    def main(self) -> tuple[str, str] | None:
        if self._main is None and _SESSION_ID.fullmatch(self.session_id):
            self._main = next((found for found in main_transcripts(self.roots, self.session_id)
                               if within_root(*found)), None)
        return self._main

    def subagent_dir(self) -> str | None:
        found = self.main()
        return None if found is None else subagents_dir(found[1])

    def agent_path(self, agent_id: str) -> str | None:
        where = self.subagent_dir()
        if where is None or not _AGENT_ID.fullmatch(agent_id):
            return None
        return agent_transcript(where, agent_id)

    def subagents(self) -> list[tuple[str, str]]:
        """(agent id, path) of the subagent files there now."""
        where = self.subagent_dir()
        try:
            names = sorted(os.listdir(where)) if where is not None else []
        except OSError:
            return []
        assert where is not None
        return [(n[len("agent-"):-len(".jsonl")], os.path.join(where, n))
                for n in names if n.startswith("agent-") and n.endswith(".jsonl")]

    def paths(self) -> list[str]:
        """Every transcript file of the session there now, main file first."""
        found = self.main()
        return [] if found is None else [found[1], *(p for _, p in self.subagents())]


@dataclass
class _Followed:
    tailer: Tailer
    agent_id: str | None
    history_end: int  # bytes before this offset were there when the observer started
    meta_loaded: bool = False


@dataclass
class _Session:
    files: SessionFiles
    followed: dict[str, _Followed] = field(default_factory=dict)


class Matcher:
    """Reads the watched sessions' transcripts and hands each SDK message its line.

    ``start_ns``: lines older than this are history. ``resumed``: sessions known before the
    start (``resume=``): their files' sizes now are history too, whatever their timestamps say
    (a synced copy written on a machine whose clock was ahead). ``max_unmatched`` and
    ``max_unmatched_bytes``: how many unclaimed lines, and how many bytes of them, wait at most.
    """

    def __init__(self, roots: Sequence[str], start_ns: int, resumed: Iterable[str] = (),
                 max_unmatched: int = 4096, max_line_bytes: int = 64 << 20,
                 max_unmatched_bytes: int = 64 << 20) -> None:
        self.roots = tuple(roots)
        self.start_ns = start_ns
        self.max_unmatched = max_unmatched
        self.max_unmatched_bytes = max_unmatched_bytes
        self._held_bytes = 0
        self.max_line_bytes = max_line_bytes
        self.stats = MatchStats()
        self._sessions: dict[str, _Session] = {}
        self._held: OrderedDict[str, _Held] = OrderedDict()  # uuid -> line, oldest first
        self._by_signature: dict[tuple[str, str], list[str]] = {}  # (kind, signature) -> uuids, oldest first
        self._agent_of: dict[str, str] = {}  # Agent tool_use id -> agent id
        self._history: dict[str, int] = {}  # path -> size at the start, for resumed sessions
        self._uuids_agree = False  # a stream uuid was found in a transcript: the CLI keeps them equal
        for sid in resumed:
            files = SessionFiles(self.roots, sid)
            for path in files.paths():
                self._history[path] = _size(path)

    @property
    def sessions(self) -> list[str]:
        return list(self._sessions)

    def watch(self, session_id: str) -> bool:
        """Follow this session's files from now on. True when it was not followed yet."""
        if session_id in self._sessions:
            return False
        self._sessions[session_id] = _Session(SessionFiles(self.roots, session_id))
        return True

    def persisted(self, session_id: str) -> bool:
        """Whether the session's transcript exists (it does not with --no-session-persistence)."""
        sess = self._sessions.get(session_id)
        return sess is not None and sess.files.main() is not None

    def any_persisted(self) -> bool:
        return any(s.files.main() is not None for s in self._sessions.values())

    # -- reading -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read what was appended to every file of the watched sessions."""
        for sess in self._sessions.values():
            found = sess.files.main()
            if found is None:
                continue
            self._follow(sess, found[1], None)
            for agent_id, path in sess.files.subagents():
                self._follow(sess, path, agent_id)
            for path, followed in list(sess.followed.items()):
                if followed.agent_id is not None and not followed.meta_loaded:
                    self._load_meta(path, followed)
                self._read(sess, followed)

    def _follow(self, sess: _Session, path: str, agent_id: str | None) -> None:
        if path not in sess.followed:
            tailer = Tailer(path, max_line_bytes=self.max_line_bytes)
            sess.followed[path] = _Followed(tailer, agent_id, self._history.get(path, 0))

    def _load_meta(self, path: str, followed: _Followed) -> None:
        """meta.json names the Agent tool_use that spawned the file's agent (its messages carry
        that id as parent_tool_use_id)."""
        meta_path = path[: -len(".jsonl")] + ".meta.json"
        try:
            with open_regular(meta_path) as f:
                meta = orjson.loads(f.read(1 << 20))
        except (OSError, orjson.JSONDecodeError):
            return  # not written yet, or being written: tried again at the next read
        followed.meta_loaded = True
        tool_use_id = meta.get("toolUseId") if isinstance(meta, dict) else None
        if isinstance(tool_use_id, str) and followed.agent_id is not None:
            self._agent_of[tool_use_id] = followed.agent_id

    def _read(self, sess: _Session, followed: _Followed) -> None:
        res = followed.tailer.read()
        if res.reset:
            followed.history_end = 0  # replaced or truncated: what it holds now was written since
        for raw in res.lines:
            for obj in _objects(raw.data):
                if obj is None:
                    self.stats.bad_lines += 1
                    continue
                self._add(sess, obj, followed.agent_id, raw.offset < followed.history_end, len(raw.data))

    def _add(self, sess: _Session, obj: RawEntry, agent_id: str | None, before_start: bool, size: int) -> None:
        kind = obj.get("type")
        self._note_agent(sess, obj)
        uuid = obj.get("uuid")
        if kind not in _MATCHABLE or not isinstance(uuid, str):
            return
        stamp = parse_timestamp(obj.get("timestamp"))
        if before_start or (stamp is not None and stamp < self.start_ns):
            self.stats.history_skipped += 1
            return
        if uuid in self._held:
            return  # the same line written twice (a resume): the first copy waits
        message = obj.get("message")
        signature = content_signature(message.get("content")) if isinstance(message, dict) else None
        line_agent = obj.get("agentId") if obj.get("isSidechain") else None
        held = _Held(obj, str(kind), agent_id or (line_agent if isinstance(line_agent, str) else None), signature,
                     size)
        self._held[uuid] = held
        self._held_bytes += size
        if signature is not None:
            self._by_signature.setdefault((held.kind, signature), []).append(uuid)
        while len(self._held) > self.max_unmatched or (self._held_bytes > self.max_unmatched_bytes and
                                                       len(self._held) > 1):
            old_uuid, old = self._held.popitem(last=False)
            self._unindex(old_uuid, old)
            self.stats.evicted += 1
        self.stats.queued = len(self._held)

    def _note_agent(self, sess: _Session, obj: RawEntry) -> None:
        """A tool result naming the agent it ran (toolUseResult.agentId): the agent's file, and
        the tool_use id its messages carry, are known before meta.json is read."""
        result = obj.get("toolUseResult")
        if not isinstance(result, dict) or not isinstance(result.get("agentId"), str):
            return
        agent_id = result["agentId"]
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result" and \
                    isinstance(block.get("tool_use_id"), str):
                self._agent_of[block["tool_use_id"]] = agent_id
        path = sess.files.agent_path(agent_id)
        if path is not None:
            self._follow(sess, path, agent_id)

    # -- matching ----------------------------------------------------------------------------

    def take(self, wanted: Wanted, final: bool = False) -> RawEntry | None:
        """The line this message came from, removed from the queue; None when it is not there
        (yet). Once a session's stream uuids were found in its transcript, a message that has
        one is matched by signature only on the ``final`` try (its own line may still come)."""
        if wanted.uuid is not None:
            held = self._held.get(wanted.uuid)
            if held is not None and held.kind == wanted.kind:
                del self._held[wanted.uuid]
                self._unindex(wanted.uuid, held)
                self.stats.by_uuid += 1
                self._uuids_agree = True
                return held.entry
            if self._uuids_agree and not final:
                return None
        uuid = self._by_context(wanted)
        if uuid is None:
            return None
        held = self._held.pop(uuid)
        self._unindex(uuid, held)
        self.stats.by_signature += 1
        return held.entry

    def _by_context(self, wanted: Wanted) -> str | None:
        if wanted.signature is None:
            return None
        candidates = self._by_signature.get((wanted.kind, wanted.signature), [])
        if wanted.parent_tool_use_id is None:
            return next((u for u in candidates if self._held[u].agent_id is None), None)
        agent = self._agent_of.get(wanted.parent_tool_use_id)
        if agent is not None:
            return next((u for u in candidates if self._held[u].agent_id == agent), None)
        # the agent's file is not known yet: any subagent's line with this signature
        return next((u for u in candidates if self._held[u].agent_id is not None), None)

    def _unindex(self, uuid: str, held: _Held) -> None:
        """``held`` left the queue (claimed or let go): out of the signature index too."""
        self._held_bytes -= held.size
        if held.signature is not None:
            key = (held.kind, held.signature)
            uuids = self._by_signature.get(key)
            if uuids is not None:
                if uuid in uuids:
                    uuids.remove(uuid)
                if not uuids:
                    del self._by_signature[key]
        self.stats.queued = len(self._held)

    def agent_of(self, tool_use_id: str) -> str | None:
        """The agent an Agent tool_use ran (from meta.json or toolUseResult.agentId)."""
        return self._agent_of.get(tool_use_id)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _objects(data: bytes) -> list[RawEntry | None]:
    """The JSON objects of one line: one, or several glued together (a summary appended without
    a newline); None for a line that is not JSON."""
    try:
        obj = orjson.loads(data)
        return [obj if isinstance(obj, dict) else None]
    except orjson.JSONDecodeError:
        pass
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    out: list[RawEntry | None] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            out.append(None)
            break
        out.append(obj if isinstance(obj, dict) else None)
    return out or [None]
