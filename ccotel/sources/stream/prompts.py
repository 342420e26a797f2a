"""The prompt a stream record's turn starts at, found in the session's transcript: the relay gives a turn
the ids the transcript path gives it (ids.trace_id of the prompt's uuid) when the transcript names it.

The stream carries each record's uuid but not the turn it belongs to; the transcript's parentUuid tree
does. Claude Code may write a line to the transcript a little after it prints it on the stream, so a
lookup is retried a few times before the turn gets ids of its own.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ccotel.read.discover import within_root
from ccotel.read.layout import projects_dir
from ccotel.read.parse import parse_line
from ccotel.read.tail import Tailer
from ccotel.rules import transcript as rules
from ccotel.sources.stream.lines import MAX_LINE_BYTES

__all__ = ["TranscriptPrompts"]

log = logging.getLogger("ccotel.relay")

_SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
_END = "turn-end"  # an _Index kind: a line after which the turn owes nothing (rules.ends_turn)
_RUNNING = frozenset(("assistant", "prompt", "command", "notification"))  # above them, a turn owes an answer


@dataclass
class _Index:
    """uuid -> (parent uuid, what the line is) of one transcript, read incrementally."""

    tailer: Tailer
    nodes: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    def read(self) -> None:
        res = self.tailer.read(accept_unterminated=True)
        if res.reset:
            self.nodes.clear()
        for raw in res.lines:
            for e in parse_line(raw.data, raw.offset).entries:
                if e.uuid is None or e.is_sidechain:
                    continue
                kind = rules.classify_user(e) if e.type == "user" else _END if rules.ends_turn(e) else e.type
                self.nodes[e.uuid] = (e.parent_uuid or e.logical_parent_uuid, kind)

    def prompt_of(self, uuid: str) -> str | None:
        """The line above ``uuid`` the transcript path starts its turn at (rules.starts_turn): the
        nearest prompt or command, or a notification written after the turn before it ended.
        Meta lines, tool results and notifications during a turn continue it."""
        current: str | None = uuid
        for _ in range(100_000):
            if current is None:
                return None
            node = self.nodes.get(current)
            if node is None:
                return None  # not written yet, or not in this file
            if rules.starts_turn(node[1], turn_running=not self._after_end(node[0])):
                return current
            current = node[0]
        return None

    def _after_end(self, uuid: str | None) -> bool:
        """Whether the turn above a line has ended: the nearest turn-ending line (rules.ends_turn) up
        the tree comes before any other answer or turn-starting line. Tool results, meta lines,
        attachments and other system lines in between change nothing (as for the assembler, where
        only a new API call makes a turn owe an answer again)."""
        for _ in range(100_000):
            node = self.nodes.get(uuid) if uuid is not None else None
            if node is None:
                return True  # the start of the file: no turn running
            if node[1] == _END:
                return True
            if node[1] in _RUNNING:
                return False
            uuid = node[0]
        return False


class TranscriptPrompts:
    """``resolve_prompt`` for sources/stream/: finds ``<root>/projects/*/<session>.jsonl`` and walks the
    parentUuid tree up from a stream record's uuid. Retried at ``delays`` (seconds, cumulative
    waits) for the flush race; a session whose transcript never appeared is not looked for again."""

    def __init__(self, roots: Sequence[str], delays: Sequence[float] = (0.0, 0.05, 0.1, 0.35, 0.5),
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.roots = tuple(roots)
        self.delays = tuple(delays)
        self.sleep = sleep
        self._indexes: dict[str, _Index] = {}
        self._absent: set[str] = set()

    def __call__(self, session_id: str, uuid: str) -> str | None:
        if session_id in self._absent or not _SESSION_ID.fullmatch(session_id):
            return None
        for delay in self.delays:
            if delay:
                self.sleep(delay)
            index = self._index(session_id)
            if index is None:
                continue
            index.read()
            found = index.prompt_of(uuid)
            if found is not None:
                return found
        if session_id not in self._indexes:
            self._absent.add(session_id)
            log.info("no transcript of session %s under %s: its spans get ids of their own", session_id,
                     ", ".join(self.roots))
        return None

    def _index(self, session_id: str) -> _Index | None:
        index = self._indexes.get(session_id)
        if index is not None:
            return index
        for root in self.roots:
            for path in sorted(glob.glob(os.path.join(glob.escape(projects_dir(root)), "*", f"{session_id}.jsonl"))):
                if within_root(root, path):
                    index = self._indexes[session_id] = _Index(Tailer(path, max_line_bytes=MAX_LINE_BYTES))
                    return index
        return None
