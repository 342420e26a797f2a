"""Read stage: the transcript files followed, each read from its checkpoint into the assembler.

``Reader`` owns the per-file tail state (``FileState``), turns whole lines into entries
(parse.py) and hands them to the assembler; it counts what it read and what it skipped as bad
input, notes format drift and Claude Code's own cost lines, and follows the orchestrator logs.
A line becomes an ``Entry`` in parse.py; the entry goes to ``Assembler.add`` in ``Reader.read``.
What is delivered, and so where checkpoints may move, is the delivery stage's (delivery.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from ccotel.assemble.assembler import Assembler
from ccotel.metrics import events
from ccotel.metrics.counters import Metrics
from ccotel.read.discover import Checkpoint, classify, mtime_ns, size_of, within_root
from ccotel.read.drift import FormatDrift
from ccotel.read.layout import projects_dir
from ccotel.read.parse import parse_line
from ccotel.read.parse_fast import fast_entry
from ccotel.read.regular import open_regular
from ccotel.read.tail import ReadResult, Tailer, lines_with
from ccotel.records import BadInput, Entry, TranscriptFile
from ccotel.rules import transcript as rules
from ccotel.sources.orchestrator import OrchestratorLog, Pattern

__all__ = ["Reader", "FileState", "ReadStats"]

# A history is read into the assembler this many bytes at a time: a large session costs a slice of
# lines in memory, not its whole size (the workers' peak RSS), at no cost in speed. 1 MiB rather than
# 4 MiB: a one-process backfill peaked lower, in the same CPU time.
_READ_SLICE = 1 << 20
_META_MAX_BYTES = 1 << 20  # an agent's meta.json is a few hundred bytes; more is not one
# How long a file checked to be inside its root is read without resolving its path again, while the
# path still opens that same file (Reader._trust): as long as within_root reuses a directory's.
_INSIDE_TTL_S = 10.0

log = logging.getLogger("ccotel.pipeline")


@dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    bytes: int = 0
    entries: int = 0
    spans: int = 0
    skipped_before_since: int = 0
    resent_skipped: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # bad input by reason (BadInput), and ledger_write
    file_resets: int = 0


@dataclass(slots=True)
class FileState:
    tf: TranscriptFile
    root: str
    tailer: Tailer
    saved_offset: int = -1
    saved_read_to: int = -1
    read_to: int = 0  # bytes already counted in the health counters (survives restarts)
    meta_loaded: bool = False
    meta_mtime_ns: int = 0
    partial_since_ns: int | None = None
    has_user: bool = False
    has_assistant: bool = False
    unreadable: bool = False
    changed_ns: int = 0
    mtime_ns: int = 0  # the file's mtime at the last read (from its fstat: the detectors' sweep age)
    inside: tuple[int, int] = (-1, -1)  # (device, inode) of the file the path led to inside the root ...
    inside_until: float = 0.0  # ... until then (time.monotonic; Reader._trust)
    # every line of the file was read by this process in order from its start: each process's last
    # cost-state line in it is remembered (costs_in_file: its start time -> model -> USD, made at the
    # first such line). Else (followed on from a checkpoint) the file itself is searched (_previous_costs)
    costs_remembered: bool = False
    costs_in_file: dict[str, dict[str, float]] | None = None


class Reader:
    """The files followed and how far each is read. ``counting`` says whether events are counted
    (the detectors' caught-up mark); ``complete``: the files are known finished (--close-all)."""

    def __init__(self, roots: tuple[str, ...], assembler: Assembler, clock: Callable[[], int],
                 metrics: Metrics | None, counting: Callable[[], bool], checkpoints: dict[str, Checkpoint],
                 capture: bool, max_line_bytes: int, stall_ns: int, unterminated_grace_ns: int) -> None:
        self.roots = roots
        self.assembler = assembler
        self.clock = clock
        self.metrics = metrics
        self.counting = counting
        self.checkpoints = checkpoints
        self.capture = capture
        self.max_line_bytes = max_line_bytes
        self.stall_ns = stall_ns
        self.unterminated_grace_ns = unterminated_grace_ns
        self.files: dict[str, FileState] = {}
        self.stats = ReadStats()
        self.drift = FormatDrift()
        self.logs: list[OrchestratorLog] = []
        self.complete = False
        self.dirty: set[str] = set()  # files read since the last checkpoint
        self._partial: set[str] = set()  # files whose last line is unterminated
        self._logged_errors: set[BadInput] = set()
        self._cost_seen: dict[tuple[str, str], dict[str, float]] = {}  # (session, process) -> model -> USD

    # -- files -------------------------------------------------------------------

    def classify(self, path: str) -> tuple[str, TranscriptFile] | None:
        for root in self.roots:
            if within_root(root, path):
                tf = classify(root, path)
                if tf is not None:
                    return root, tf
        if not any(within_root(r, path) for r in self.roots) and \
                any(path.startswith(projects_dir(r)) for r in self.roots):
            self.error(BadInput.PATH_OUTSIDE_ROOT)  # a symlink under the root that leads out of it
        return None

    def track(self, root: str, tf: TranscriptFile) -> FileState:
        state = self.files.get(tf.path)
        if state is None:
            ckpt = self.checkpoints.get(tf.path)
            if ckpt is not None:
                ident, offset, read_to, marker = ckpt
                tailer = Tailer(tf.path, offset=offset, identity=ident, max_line_bytes=self.max_line_bytes,
                                marker=marker)
            else:
                tailer = Tailer(tf.path, max_line_bytes=self.max_line_bytes)
                offset = read_to = 0
            state = FileState(tf, root, tailer, saved_offset=offset if ckpt else -1,
                              saved_read_to=read_to if ckpt else -1, read_to=read_to, changed_ns=self.clock(),
                              costs_remembered=offset == 0)
            self.files[tf.path] = state
            self.stats.files += 1
        return state

    def drop(self, path: str) -> FileState | None:
        """Stop following a file (deleted)."""
        self._partial.discard(path)
        self.dirty.discard(path)
        return self.files.pop(path, None)

    def follow_log(self, path: str, source: str, patterns: tuple[Pattern, ...]) -> None:
        ckpt = self.checkpoints.get(path)
        tailer = Tailer(path, offset=ckpt[1], identity=ckpt[0], marker=ckpt[3]) if ckpt else Tailer(path)
        log_ = OrchestratorLog(path, source, tailer, patterns, saved_offset=ckpt[1] if ckpt else -1)
        if ckpt is None:
            log_.read(None, count=False)  # what the log held before ccotel followed it is history
        self.logs.append(log_)

    def read_logs(self) -> None:
        for log_ in self.logs:
            log_.read(self.metrics, count=True)

    def meta_changed(self, path: str) -> None:
        transcript = path[: -len(".meta.json")] + ".jsonl"
        found = self.classify(transcript)
        if found is None:
            return
        state = self.track(*found)
        if state.meta_loaded and mtime_ns(path) == state.meta_mtime_ns:
            return  # a directory walk saw it again: unchanged, already known
        state.meta_loaded = False
        self._load_meta(state)

    def _load_meta(self, state: FileState) -> None:
        tf = state.tf
        if state.meta_loaded or tf.meta_path is None or tf.session_id is None or tf.agent_id is None:
            return
        if not within_root(state.root, tf.meta_path):
            self.error(BadInput.PATH_OUTSIDE_ROOT)
            return
        try:
            with open_regular(tf.meta_path, buffering=0) as f:
                st = os.fstat(f.fileno())
                # Its size (and some room to grow), at most 1 MiB: read(1 MiB) allocated 1 MiB
                # for each of a history's few-hundred-byte metas, most of the time such a read took.
                meta = orjson.loads(f.read(min(st.st_size + 4096, _META_MAX_BYTES)))
        except FileNotFoundError:
            return  # written later, or not by this version; the watcher reports it
        except (OSError, orjson.JSONDecodeError):
            self.error(BadInput.BAD_META_JSON)
            return
        state.meta_loaded = True
        state.meta_mtime_ns = st.st_mtime_ns
        if isinstance(meta, dict):
            self.assembler.set_agent_meta(tf.session_id, tf.agent_id, meta, self.clock())

    # -- lines -------------------------------------------------------------------

    def read(self, state: FileState, accept_unterminated: bool, live: bool = True) -> None:
        """Read new whole lines of a file into the assembler. ``live``: the lines arrive now (their
        arrival time counts as activity); history read during a catch-up has only its timestamps.
        A long history is read in slices of about _READ_SLICE bytes: memory holds one slice of
        lines, not the file."""
        only = state.inside if time.monotonic() < state.inside_until else None
        if only is None and not self._inside(state):
            return
        now = self.clock()
        # A last line without its newline is taken, even broken, once its writer is surely gone: the
        # data is known complete (--close-all), or the file has been silent past the stall timeout.
        force = accept_unterminated and self.complete
        quiet_before = now - self.stall_ns if accept_unterminated and not force else None
        while True:
            res = state.tailer.read(accept_unterminated=accept_unterminated, max_bytes=_READ_SLICE,
                                    force_tail=force, quiet_before_ns=quiet_before, only=only)
            if res.other_file:  # not the file checked: the path is checked again before a read
                state.inside_until = 0.0
                if not self._inside(state):
                    return
                only = None
                continue
            if not self._take(state, res, now, live) or not res.more:
                break
        if only is None and live:  # (history is read once: nothing to trust it for)
            self._trust(state)
        if BadInput.UNREADABLE in res.errors:
            return
        state.mtime_ns = res.mtime_ns or state.mtime_ns
        state.partial_since_ns = now if res.size > state.tailer.offset else None
        if state.partial_since_ns is None:
            self._partial.discard(state.tf.path)
        else:
            self._partial.add(state.tf.path)
        self.dirty.add(state.tf.path)

    def _inside(self, state: FileState) -> bool:
        """The path, every symlink resolved, is under the file's root (else counted, not read)."""
        if within_root(state.root, state.tf.path):
            return True
        self.error(BadInput.PATH_OUTSIDE_ROOT)
        return False

    @staticmethod
    def _trust(state: FileState) -> None:
        """After a read checked by within_root: the file read is the one the path names now (its
        device and inode), so reads in the next _INSIDE_TTL_S open the path and read it only if
        it is still that file, without resolving the path again (two lstat calls and the
        resolution's Python, per read). A file replaced, or reached through a directory swapped
        for a symlink, is another inode: checked again before anything is read. The same file
        moved out of the root and linked back is read until the entry expires, as within_root's
        own directory cache allows (discover._DIR_TTL_S)."""
        ident = state.tailer.identity
        if ident is None:
            return
        try:
            st = os.stat(state.tf.path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) == (ident.dev, ident.ino):
            state.inside = (ident.dev, ident.ino)
            state.inside_until = time.monotonic() + _INSIDE_TTL_S

    def _take(self, state: FileState, res: ReadResult, now: int, live: bool) -> bool:
        """One slice of a file's lines into the assembler; False if the file could not be read."""
        if res.reset:
            self.stats.file_resets += 1
            state.costs_remembered, state.costs_in_file = True, None  # read again from its start
            state.read_to = 0
            state.saved_read_to = -1  # the next commit writes its new identity and marker
        for err, end in zip(res.errors, res.error_ends, strict=False):
            if end < 0:  # the file itself (unreadable): once until it reads again
                if not state.unreadable:
                    state.unreadable = True
                    self.error(err, state.tf.path)
            else:
                self.error(err, f"{state.tf.path}@{end}", count=end > state.read_to)
        if BadInput.UNREADABLE in res.errors:
            return False
        state.unreadable = False
        if res.lines:
            self._load_meta(state)  # before its lines: agentType and the spawning tool call
        new_bytes = new_lines = 0
        read_to, capture, arrival = state.read_to, self.capture, now if live else 0
        stats = self.stats
        lines = line_bytes = 0
        try:
            for line in res.lines:
                lines += 1
                size = line.end - line.offset
                line_bytes += size
                fresh = line.end > read_to  # not read before a restart
                if fresh:
                    new_lines += 1
                    new_bytes += size
                entry = fast_entry(line.data, line.offset, capture)
                if entry is not None:  # most lines: what parse_line would give, without its lists
                    self._entry(state, entry, line.data, fresh, arrival)
                    continue
                parsed = parse_line(line.data, line.offset, capture, fast=False)
                for err in parsed.errors:
                    self.error(err, f"{state.tf.path}@{line.offset}", count=fresh)
                for entry in parsed.entries:
                    self._entry(state, entry, line.data, fresh, arrival)
        finally:  # counted once per slice, and exactly also when a line raised
            stats.lines += lines
            stats.bytes += line_bytes
        if res.lines:
            state.changed_ns = now
        state.read_to = max(state.read_to, state.tailer.offset)
        if self.metrics is not None and new_lines:
            events.read(self.metrics, new_lines, new_bytes)
        return True

    def _entry(self, state: FileState, entry: Entry, data: bytes, fresh: bool, arrival_ns: int) -> None:
        self.stats.entries += 1
        if self.metrics is not None:  # drift is only ever counted (a backfill without metrics skips it)
            for drift in self.drift.observe(entry, data):
                if fresh and self.counting():
                    events.format_unknown(self.metrics, *drift)
        etype = entry.type
        if etype == "cost-state":
            self._reported_cost(state, entry, fresh)
        if rules.is_assistant_record(entry):
            state.has_assistant = True
            if entry.message_id is not None and entry.usage is not None and fresh and self.metrics is not None \
                    and self.counting():
                missing = _missing_envelope(entry)
                if missing is not None:
                    events.call_without_envelope(self.metrics, missing)
        elif etype == "user":
            state.has_user = True
        self.assembler.add(entry, state.tf, arrival_ns)

    def partials_due(self, now: int) -> list[FileState]:
        """Files whose unterminated last line stayed so past the grace (its writer is done)."""
        due = []
        for path in list(self._partial):
            state = self.files.get(path)
            if state is None:
                self._partial.discard(path)
            elif state.partial_since_ns is not None and now - state.partial_since_ns >= self.unterminated_grace_ns:
                due.append(state)
        return due

    def shift(self, step: int) -> None:
        """The wall clock stepped: what waits for silence waits from the stepped time."""
        for st in self.files.values():
            st.changed_ns += step
            if st.partial_since_ns is not None:
                st.partial_since_ns += step

    def _reported_cost(self, state: FileState, e: Entry, fresh: bool) -> None:
        """Claude Code's own cost (2.1.3xx cost-state lines: a running total per process and model)
        counted as increments, beside ccotel's estimate. The total before this line is remembered,
        or after a restart found in the file itself, so a restart never counts a process twice (a
        file read here from its start remembers its own: it is not read again for it)."""
        if e.process_start is None:
            return
        in_file = _costs_before(state, e.process_start, e.reported_costs)
        if not e.reported_costs:
            return
        key = (e.session_id or state.tf.session_id or "", e.process_start)
        prev = self._cost_seen.get(key)
        if prev is None:
            prev = in_file if in_file is not None else \
                _previous_costs(state.tf.path, e.offset, e.process_start, self.max_line_bytes)
        if len(self._cost_seen) > 10_000:
            self._cost_seen.clear()
        self._cost_seen[key] = dict(e.reported_costs)
        if not fresh or self.metrics is None or not self.counting():
            return
        for model, total in e.reported_costs:
            before = prev.get(model, 0.0)
            delta = total - before if total >= before else total  # a process that started again from 0
            if delta > 0:
                events.reported_cost(self.metrics, model, delta)

    def error(self, reason: BadInput, where: str | None = None, count: bool = True) -> None:
        self.stats.errors[reason] += 1
        if count and self.metrics is not None:
            events.parse_error(self.metrics, reason)
        if reason not in self._logged_errors:
            self._logged_errors.add(reason)
            # "counted" where a counter says so (ccotel run's metrics; a backfill's last line sums them too)
            log.warning("skipped bad input (%s)%s; %sfurther ones not logged", reason, f" at {where}" if where else "",
                        "counted in ccotel_parse_errors_total, " if self.metrics is not None else "")

    def lag_s(self, now: int, since_ns: int) -> float:
        """Age of the oldest unread bytes written since ``since_ns`` (history waiting for a
        catch-up is not lag). Safe from another thread: it works on a copy of the file list."""
        lag = 0.0
        for st in list(self.files.values()):
            if st.partial_since_ns is None and size_of(st.tf.path) > st.tailer.offset:
                written = mtime_ns(st.tf.path)
                if written >= since_ns:
                    lag = max(lag, (now - written) / 1e9)
        return max(lag, 0.0)


def _missing_envelope(e: Entry) -> str | None:
    """The first envelope field an assistant line with a call lacks, if any."""
    if e.no_type:
        return "type"
    if e.uuid is None:
        return "uuid"
    return "sessionId" if e.session_id is None else None


# processes a file's cost-state lines are remembered for; a file with more is searched instead
_PROCESSES_PER_FILE = 256


def _costs_before(state: FileState, process_start: str,
                  costs: tuple[tuple[str, float], ...]) -> dict[str, float] | None:
    """What _previous_costs would find before a cost-state line of this process, when the lines
    before it were all read here; None when they were not. The line's costs are then remembered
    for the process's next line."""
    if not state.costs_remembered:
        return None
    seen = state.costs_in_file
    if seen is None:
        seen = state.costs_in_file = {}
    before = seen.get(process_start, {})
    if len(seen) >= _PROCESSES_PER_FILE and process_start not in seen:
        state.costs_remembered, state.costs_in_file = False, None
    else:
        seen[process_start] = dict(costs)
    return before


def _previous_costs(path: str, before: int, process_start: str, max_line_bytes: int) -> dict[str, float]:
    """The last cost-state of a process before an offset of its file (once per process after a restart)."""
    found: dict[str, float] = {}
    for offset, line in lines_with(path, b'"cost-state"', max_line_bytes):
        if offset >= before:
            break
        for e in parse_line(line, offset).entries:
            if e.type == "cost-state" and e.process_start == process_start:
                found = dict(e.reported_costs)
    return found
