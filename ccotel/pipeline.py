"""The data flow, wired: discover -> tail -> parse -> assemble -> spans -> export.

``Pipeline`` owns the per-file tail state and the assembler. It does no waiting of its own:
``backfill`` reads everything once; ``poll`` reads what a watcher reported; ``tick`` closes
what time has finished. The CLI drives it, tests drive it directly.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from .assemble import Assembler, Finished, Timeouts
from .content import ContentPolicy
from .discover import classify, scan, within_root
from .parse import parse_line, parse_timestamp
from .records import FileKind, SpanRecord, TranscriptFile
from .spans import build_span
from .tail import Tailer

__all__ = ["Pipeline", "PipelineStats", "Options"]

log = logging.getLogger("ccotel.pipeline")


@dataclass(frozen=True)
class Options:
    roots: tuple[str, ...]
    since_ns: int | None = None
    timeouts: Timeouts = Timeouts()
    content: ContentPolicy | None = None  # None: content is not exported
    max_line_bytes: int = 64 << 20
    # A live file's unterminated last line is taken after this much quiet.
    unterminated_grace_ns: int = 2_000_000_000


@dataclass
class PipelineStats:
    files: int = 0
    lines: int = 0
    bytes: int = 0
    entries: int = 0
    spans: int = 0
    skipped_before_since: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    file_resets: int = 0


@dataclass
class _FileState:
    tf: TranscriptFile
    root: str
    tailer: Tailer
    meta_loaded: bool = False
    partial_since_ns: int | None = None


class Pipeline:
    def __init__(self, options: Options, emit: Callable[[list[SpanRecord]], object],
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.options = options
        self.emit = emit
        self.clock = clock
        self.assembler = Assembler(options.timeouts, capture_content=options.content is not None)
        self.files: dict[str, _FileState] = {}
        self.stats = PipelineStats()
        self._logged_errors: set[str] = set()

    # -- backfill ----------------------------------------------------------------

    def discover(self) -> list[tuple[str, TranscriptFile]]:
        found = []
        for root in self.options.roots:
            for tf in scan(root):
                if self.options.since_ns is not None and _mtime_ns(tf.path) < self.options.since_ns:
                    continue
                found.append((root, tf))
        return found

    def backfill(self, progress: Callable[[int, int], None] | None = None,
                 close_all: bool = False) -> int:
        """Read every transcript once. Returns how many turns stay open (still running).

        Files are read session by session (main file, then its subagents) and each finished
        session's state is dropped, so memory does not grow with history.
        """
        files = self.discover()
        total = sum(_size(tf.path) for _, tf in files)
        done = 0
        for group in _session_groups(files):
            for root, tf in group:
                state = self._track(root, tf)
                before = state.tailer.offset
                self._read(state, accept_unterminated=True)
                done += max(state.tailer.offset - before, 0)
                if progress is not None:
                    progress(done, total)
            self._flush_group(group, close_all)
        kept = self.assembler.flush(None if close_all else self.clock())
        self._emit()
        return kept

    def _flush_group(self, group: list[tuple[str, TranscriptFile]], close_all: bool) -> None:
        sessions = {tf.session_id for _, tf in group if tf.session_id}
        if any(tf.kind is FileKind.FLAT_AGENT for _, tf in group):
            return  # 2.0.x flat agent files name their session only inside: keep it to the end
        for sid in sessions:
            self.assembler.flush(None if close_all else self.clock(), session_id=sid)
        self._emit()

    # -- live --------------------------------------------------------------------

    def poll(self, paths: Iterable[str]) -> None:
        """Read what changed. Paths may be files, meta.json files or new directories."""
        for path in paths:
            if os.path.isdir(path):
                self._scan_dir(path)
                continue
            if path.endswith(".meta.json"):
                self._meta_changed(path)
                continue
            state = self.files.get(path)
            if state is None:
                found = self._classify(path)
                if found is None:
                    continue
                state = self._track(*found)
            self._read(state, accept_unterminated=False)
        self._emit()

    def rescan(self) -> None:
        """Pick up files the watcher missed (created before their directory's watch existed)."""
        for root in self.options.roots:
            for tf in scan(root):
                if tf.path not in self.files:
                    state = self._track(root, tf)
                    self._read(state, accept_unterminated=False)
        self._emit()

    def tick(self) -> None:
        now = self.clock()
        for state in self.files.values():
            if state.partial_since_ns is not None and now - state.partial_since_ns >= self.options.unterminated_grace_ns:
                self._read(state, accept_unterminated=True)
        self.assembler.tick(now)
        self._emit()

    # -- internals ---------------------------------------------------------------

    def _classify(self, path: str) -> tuple[str, TranscriptFile] | None:
        for root in self.options.roots:
            if within_root(root, path):
                tf = classify(root, path)
                if tf is not None:
                    return root, tf
        return None

    def _scan_dir(self, path: str) -> None:
        for dirpath, _dirs, names in os.walk(path, followlinks=False):
            for name in sorted(names):
                full = os.path.join(dirpath, name)
                if full.endswith(".jsonl") and full not in self.files:
                    self.poll([full])
                elif full.endswith(".meta.json"):
                    self._meta_changed(full)

    def _track(self, root: str, tf: TranscriptFile) -> _FileState:
        state = self.files.get(tf.path)
        if state is None:
            state = _FileState(tf, root, Tailer(tf.path, max_line_bytes=self.options.max_line_bytes))
            self.files[tf.path] = state
            self.stats.files += 1
        return state

    def _meta_changed(self, path: str) -> None:
        transcript = path[: -len(".meta.json")] + ".jsonl"
        found = self._classify(transcript)
        if found is None:
            return
        state = self._track(*found)
        state.meta_loaded = False
        self._load_meta(state)

    def _load_meta(self, state: _FileState) -> None:
        tf = state.tf
        if state.meta_loaded or tf.meta_path is None or tf.session_id is None or tf.agent_id is None:
            return
        if not within_root(state.root, tf.meta_path):
            self._error("path_outside_root")
            return
        try:
            with open(tf.meta_path, "rb") as f:
                meta = orjson.loads(f.read(1 << 20))
        except FileNotFoundError:
            return  # written later, or not by this version; the watcher reports it
        except (OSError, orjson.JSONDecodeError):
            self._error("bad_meta_json")
            return
        state.meta_loaded = True
        if isinstance(meta, dict):
            self.assembler.set_agent_meta(tf.session_id, tf.agent_id, meta)

    def _read(self, state: _FileState, accept_unterminated: bool) -> None:
        self._load_meta(state)
        if not within_root(state.root, state.tf.path):
            self._error("path_outside_root")
            return
        res = state.tailer.read(accept_unterminated=accept_unterminated)
        if res.reset:
            self.stats.file_resets += 1
        for err in res.errors:
            self._error(err)
        now = self.clock()
        capture = self.options.content is not None
        for line in res.lines:
            self.stats.lines += 1
            self.stats.bytes += line.end - line.offset
            parsed = parse_line(line.data, line.offset, capture)
            for err in parsed.errors:
                self._error(err, f"{state.tf.path}@{line.offset}")
            for entry in parsed.entries:
                self.stats.entries += 1
                self.assembler.add(entry, state.tf, now)
        state.partial_since_ns = now if _has_partial(state) else None

    def _emit(self) -> None:
        finished = self.assembler.drain()
        if not finished:
            return
        spans = []
        for f in finished:
            if self.options.since_ns is not None and _start_of(f) < self.options.since_ns:
                self.stats.skipped_before_since += 1
                continue
            spans.append(build_span(f, self.options.content))
        if spans:
            self.stats.spans += len(spans)
            self.emit(spans)

    def _error(self, reason: str, where: str | None = None) -> None:
        self.stats.errors[reason] += 1
        if reason not in self._logged_errors:
            self._logged_errors.add(reason)
            log.warning("skipped bad input (%s)%s; counted, further ones not logged", reason,
                        f" at {where}" if where else "")


def _start_of(f: Finished) -> int:
    item = f.item
    owner = getattr(item, "owner", None) or item
    return int(getattr(owner, "start_ns", 0))


def _has_partial(state: _FileState) -> bool:
    return _size(state.tf.path) > state.tailer.offset


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _session_groups(files: list[tuple[str, TranscriptFile]]) -> list[list[tuple[str, TranscriptFile]]]:
    """Main file + subagent files of one session together; a project with 2.0.x flat agent
    files is one group (their session is only named inside them)."""
    groups: dict[tuple[str, str, str | None], list[tuple[str, TranscriptFile]]] = {}
    flat_projects = {(root, tf.project) for root, tf in files if tf.kind is FileKind.FLAT_AGENT}
    for root, tf in files:
        key = (root, tf.project, None if (root, tf.project) in flat_projects else tf.session_id)
        groups.setdefault(key, []).append((root, tf))
    for group in groups.values():
        group.sort(key=lambda rt: (rt[1].kind is not FileKind.MAIN, rt[1].path))
    # Oldest session first: when a session's history was copied into a new session file, the
    # original (same first line, but it ends earlier) is read first and keeps its traces and
    # usage; ccotel counts each API call once.
    return sorted(groups.values(), key=lambda g: _time_span(g[0][1].path))


def _time_span(path: str) -> tuple[int, int]:
    """First and last line timestamps of a file, from its first and last 64 KiB."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - (1 << 16)))
            tail = f.read(1 << 16)
    except OSError:
        return (0, 0)
    stamps = [_timestamps(head), _timestamps(tail)]
    first = stamps[0][0] if stamps[0] else 0
    last = stamps[1][-1] if stamps[1] else first
    return (first, last)


def _timestamps(chunk: bytes) -> list[int]:
    out = []
    for line in chunk.split(b"\n"):
        i = line.find(b'"timestamp":"')
        if i >= 0:
            ts = parse_timestamp(line[i + 13: i + 53].split(b'"', 1)[0].decode("ascii", "replace"))
            if ts is not None:
                out.append(ts)
    return out
