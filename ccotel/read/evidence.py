"""What a config dir knows of a session besides its transcript: the evidence ``ccotel check`` and the
detectors give ``rules.absent_reason`` when a transcript is not there.

Evidence, and where each was seen with the real CLI (tests/harness/NOTES.md, "Absent transcripts"):
- ``sessions/<pid>.json`` (``sessionId``, ``startedAt``, 2.1.3xx ``updatedAt``): every CLI process
  while it runs, persistence on or off; left behind by a SIGKILL.
- ``history.jsonl`` (``sessionId``, ``timestamp`` ms): prompts typed in an interactive session. ``-p``
  never writes it, nor does ``CLAUDE_CODE_SKIP_PROMPT_HISTORY``; ``--no-session-persistence`` only
  works with ``-p``. So a session in it had its transcript written.
- ``projects/<dir>/<id>/`` (``subagents/``, ``tool-results/``): remnants of a transcript. The sweep
  deletes them with it, but one may outlive the ``.jsonl`` it belonged to.
- ``session-env/<id>/``: an empty dir every run creates (persistence on or off); swept by age.
Nothing here is read outside the roots; unreadable files are skipped (no evidence), never fatal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import BinaryIO

import orjson

from ccotel.read.discover import OutsideRoot, readable_under
from ccotel.read.layout import main_transcripts, projects_dir
from ccotel.read.regular import open_regular
from ccotel.read.tree import walk
from ccotel.rules import transcript as rules

__all__ = ["Evidence", "HistoryIndex", "known_sessions", "is_session_id", "retention_of",
           "transcripts_of"]

_MAX_JSON = 1 << 16


@dataclass
class Evidence:
    """What is known of one session id without its transcript."""

    session_id: str
    sources: list[str] = field(default_factory=list)  # "<path>: <what>" for the report
    last_seen_s: float | None = None
    had_transcript: bool = False
    cwd: str | None = None
    pids: list[tuple[int, str | None]] = field(default_factory=list)

    def saw(self, when_s: float | None, source: str) -> None:
        self.sources.append(source)
        if when_s is not None and (self.last_seen_s is None or when_s > self.last_seen_s):
            self.last_seen_s = when_s


def _load(root: str, path: str, outside: OutsideRoot | None) -> object:
    if not readable_under(root, path, outside):  # a symlink out of the root: not read
        return None
    try:
        with open_regular(path) as f:
            return orjson.loads(f.read(_MAX_JSON))
    except (OSError, orjson.JSONDecodeError):
        return None


def retention_of(root: str, outside: OutsideRoot | None = None) -> int:
    """cleanupPeriodDays of ``<root>/settings.json`` (Claude Code's default 30)."""
    doc = _load(root, os.path.join(root, "settings.json"), outside)
    return rules.retention_days(doc if isinstance(doc, dict) else None)


def transcripts_of(roots: tuple[str, ...], session_id: str) -> list[str]:
    """Every ``projects/<dir>/<id>.jsonl`` of the session under the roots."""
    return [path for _root, path in main_transcripts(roots, session_id)]


# history.jsonl is read this much at a time; a line longer than the limit (a prompt with a huge
# paste) is passed over: it gives one session's prompt time, and other lines give the rest.
_HISTORY_PIECE = 1 << 20
_HISTORY_LINE_MAX = 4 << 20


class HistoryIndex:
    """``history.jsonl`` read incrementally (it only grows): session id -> newest prompt time (s)."""

    def __init__(self, path: str, root: str | None = None, outside: OutsideRoot | None = None) -> None:
        self.path = path
        self.root = root if root is not None else os.path.dirname(path)  # the root it must resolve inside
        self.outside = outside if outside is not None else OutsideRoot()  # one: the file is read again and again
        self.offset = 0
        self.last: dict[str, float] = {}

    def update(self) -> dict[str, float]:
        """The index with the whole lines written since the last call. Read a piece at a time: the
        file is never swept and holds every pasted text, so a first read of it whole held its size
        (and its lines again) in memory; a line longer than _HISTORY_LINE_MAX is passed over."""
        if not readable_under(self.root, self.path, self.outside):  # checked at each read: the link may come later
            return self.last
        try:
            with open_regular(self.path) as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # rewritten: read again
                    self.offset, self.last = 0, {}
                f.seek(self.offset)
                self._read(f)
        except OSError:
            pass
        return self.last

    def _read(self, f: BinaryIO) -> None:
        pos = self.offset  # the file position of the next piece
        carry = b""  # the start of a line that no piece so far ended
        skipping = False  # inside a line over the limit: up to its newline
        while piece := f.read(_HISTORY_PIECE):
            piece_start, pos = pos, pos + len(piece)
            end = piece.rfind(b"\n") + 1
            if not end:  # no line ends in this piece
                skipping = skipping or len(carry) + len(piece) > _HISTORY_LINE_MAX
                carry = b"" if skipping else carry + piece
                continue
            lines = (carry + piece[:end]).split(b"\n")
            for line in lines[1:] if skipping else lines:  # (skipping: the first is the long line's end)
                self._take(line)
            self.offset = piece_start + end  # every line before it taken
            carry, skipping = piece[end:], False
            if len(carry) > _HISTORY_LINE_MAX:
                carry, skipping = b"", True

    def _take(self, line: bytes) -> None:
        if not line:
            return
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        if isinstance(doc, dict) and isinstance(sid := doc.get("sessionId"), str):
            ts = doc.get("timestamp")
            when = ts / 1000 if isinstance(ts, (int, float)) else 0.0
            self.last[sid] = max(self.last.get(sid, 0.0), when)


def known_sessions(roots: tuple[str, ...], histories: dict[str, HistoryIndex] | None = None,
                   outside: OutsideRoot | None = None) -> dict[str, Evidence]:
    """Every session id the roots know of from sessions files, history.jsonl and transcript remnants,
    with its evidence. ``histories`` (root -> index) keeps history.jsonl offsets between calls;
    ``outside`` is told of a side file that leads out of its root."""
    found: dict[str, Evidence] = {}

    def ev(sid: str) -> Evidence:
        return found.setdefault(sid, Evidence(sid))

    for root in roots:
        sessions = os.path.join(root, "sessions")
        for name in _listdir(sessions):
            path = os.path.join(sessions, name)
            doc = _load(root, path, outside) if name.endswith(".json") else None
            if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
                continue
            if isinstance(sid := doc.get("sessionId"), str):
                times = [t / 1000 for k in ("startedAt", "updatedAt") if isinstance(t := doc.get(k), (int, float))]
                e = ev(sid)
                e.saw(max(times) if times else None, f"{path}: process {doc['pid']}")
                start = doc.get("procStart")
                e.pids.append((doc["pid"], str(start) if start is not None else None))
                e.cwd = doc.get("cwd") if isinstance(doc.get("cwd"), str) else e.cwd
        hist_path = os.path.join(root, "history.jsonl")
        index = (histories or {}).get(root) or HistoryIndex(hist_path, root, outside)
        if histories is not None:
            histories[root] = index
        for sid, when in index.update().items():
            e = ev(sid)
            e.saw(when or None, f"{hist_path}: prompts typed in it")
            e.had_transcript = True
        projects = projects_dir(root)
        for d in _listdir(projects):
            try:
                entries = list(os.scandir(os.path.join(projects, d)))
            except OSError:
                continue
            names = {x.name for x in entries}
            for x in entries:  # scandir: no stat per entry (10,000 sessions are scanned every few minutes)
                if is_session_id(x.name) and x.name + ".jsonl" not in names and x.is_dir(follow_symlinks=False):
                    e = ev(x.name)
                    e.saw(_newest_mtime(x.path), f"{x.path}/: transcript remnants without {x.name}.jsonl")
                    e.had_transcript = True
        env_dir = os.path.join(root, "session-env")
        for name in _listdir(env_dir):
            if name in found:  # alone it says nothing (every run makes one): only its age counts
                found[name].saw(_mtime(os.path.join(env_dir, name)), f"{os.path.join(env_dir, name)}/")
    return found


def is_session_id(name: str) -> bool:
    """A directory name that is a session id (a UUID: 36 characters, 4 dashes)."""
    return len(name) == 36 and name.count("-") == 4


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _newest_mtime(path: str) -> float | None:
    """The newest mtime under a remnant dir (bounded walk: a few levels, what the CLI writes)."""
    newest = _mtime(path)
    for dirpath, dirs, files in walk(path):
        if dirpath.count(os.sep) - path.count(os.sep) > 3:
            dirs[:] = []
        for n in files:
            t = _mtime(os.path.join(dirpath, n))
            if t is not None and (newest is None or t > newest):
                newest = t
    return newest
