"""The data flow, wired: discover -> tail -> parse -> assemble -> spans -> export -> checkpoint.

``Pipeline`` owns the per-file tail state, the assembler and the delivery bookkeeping. It does
no waiting of its own: ``backfill`` reads everything once; ``poll`` reads what a watcher
reported; ``tick`` closes what time has finished and runs the detectors; ``acknowledge`` (any
thread) takes the batches the backend accepted and ``process_acks`` (the pipeline's thread)
moves the checkpoints.

Checkpoint rule: a file's offset moves past a line only when every span built from it was
acknowledged. Lines of a turn still open (or not yet delivered) are re-read after a restart;
spans of it already delivered are not sent again (state.acked).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from . import rules
from .assemble import AgentRun, Assembler, Finished, Owner, Timeouts, Turn
from .content import ContentPolicy
from .discover import classify, scan, within_root
from .drift import FormatDrift
from .export_result import ExportResult
from .metrics import Metrics
from .orchestrator import DEFAULT_PATTERNS, OrchestratorLog, Pattern
from .parse import parse_line, parse_timestamp
from .pricing import DEFAULT_PRICING, Pricing
from .procs import Proc, any_alive, read_session_pids
from .records import Entry, FileKind, SpanRecord, TranscriptFile
from .shard import Group
from .spans import DEFAULT_CONVENTIONS, Conventions, build_spans
from .state import PERMANENT, Commit, State, anchor_of, digest64
from .tail import FileIdentity, Tailer, lines_with

__all__ = ["Pipeline", "PipelineStats", "Options", "discover", "session_groups", "unread_bytes"]

log = logging.getLogger("ccotel.pipeline")

_Checkpoint = tuple[FileIdentity | None, int, int]  # a file's checkpoint (state.files()): identity, offset, read_to


@dataclass(frozen=True)
class Options:
    roots: tuple[str, ...]
    since_ns: int | None = None
    timeouts: Timeouts = Timeouts()
    content: ContentPolicy | None = None  # None: content is not exported
    max_line_bytes: int = 64 << 20
    # A live file's unterminated last line is taken after this much quiet.
    unterminated_grace_ns: int = 2_000_000_000
    orchestrator_logs: tuple[tuple[str, str], ...] = ()  # (path, source label)
    orchestrator_patterns: tuple[Pattern, ...] = DEFAULT_PATTERNS
    conventions: Conventions = DEFAULT_CONVENTIONS
    pricing: Pricing = DEFAULT_PRICING


@dataclass
class PipelineStats:
    files: int = 0
    lines: int = 0
    bytes: int = 0
    entries: int = 0
    spans: int = 0
    skipped_before_since: int = 0
    resent_skipped: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    file_resets: int = 0


@dataclass
class _FileState:
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


class Pipeline:
    def __init__(self, options: Options, emit: Callable[[list[SpanRecord]], object],
                 clock: Callable[[], int] = time.time_ns, state: State | None = None,
                 metrics: Metrics | None = None, elapsed: Callable[[], int] | None = None) -> None:
        self.options = options
        self.emit = emit
        self.clock = clock
        # A steady clock beside the wall clock tells a step of the wall clock (NTP, a resumed VM)
        # from real silence. By default only with the real wall clock: a test's fake clock moves
        # alone on purpose.
        self.elapsed = elapsed if elapsed is not None else (time.monotonic_ns if clock is time.time_ns else None)
        self._last_tick: tuple[int, int] | None = None
        self.state = state
        self.metrics = metrics
        self.assembler = Assembler(options.timeouts, capture_content=options.content is not None)
        self.files: dict[str, _FileState] = {}
        self.stats = PipelineStats()
        self.caught_up = False
        self._logged_errors: set[str] = set()
        self._ack_lock = threading.RLock()
        self._inflight: dict[int, tuple[Owner, bool]] = {}
        self._owners: dict[str, Owner] = {}  # not done yet: open, or spans not all acknowledged
        self._owners_by_path: dict[str, dict[str, int]] = {}  # path -> {owner token: first offset}
        self._maybe_done: set[str] = set()  # owners to look at in the next process_acks
        self._marks: set[str] = set()
        self._complete = False  # backfill --close-all: the files are known to be finished
        self._partial: set[str] = set()  # files whose last line is unterminated
        self._ghost_candidates: set[str] = set()  # main files with prompts and no assistant record yet
        self._dirty: set[str] = set()  # files read since the last checkpoint
        self._agent_files: set[tuple[str | None, str]] = set()  # (session, agent id) with a transcript
        self._new_marks: list[tuple[str, int]] = []  # (mark, anchor): committed with the next checkpoint
        self._replays: list[tuple[str, int, str]] = []  # copies seen of what an open owner holds
        self._checkpoints: dict[str, _Checkpoint] = {}
        self._acked_before: set[int] = set()
        self.traces_behind = False  # spans were let go: read again from the trace cursor (runner)
        # owners of history (not counted) whose spans were let go: still not counted when read again
        self.not_live: set[str] = set()
        self._pids: dict[str, tuple[Proc, ...]] = {}
        self._pids_read_ns = 0
        self.drift = FormatDrift()
        self._cost_seen: dict[tuple[str, str], dict[str, float]] = {}  # (session, process) -> model -> USD
        self.last_export_ns = 0
        self.started_ns = clock()
        if state is not None:
            self._checkpoints = state.files()
        self.logs = [self._log(path, source) for path, source in options.orchestrator_logs]
        if state is not None:
            self._acked_before = state.acked()
            self.assembler.preload(state.calls(), state.prompts())
            self._marks = state.marks()
            if metrics is not None:
                metrics.restore(state.counters())
        if metrics is not None:
            _declare_series(metrics, options)

    def _log(self, path: str, source: str) -> OrchestratorLog:
        ckpt = self._checkpoints.get(path)
        tailer = Tailer(path, offset=ckpt[1], identity=ckpt[0]) if ckpt else Tailer(path)
        log_ = OrchestratorLog(path, source, tailer, self.options.orchestrator_patterns,
                               saved_offset=ckpt[1] if ckpt else -1)
        if ckpt is None:
            log_.read(None, count=False)  # what the log held before ccotel followed it is history
        return log_

    # -- backfill ----------------------------------------------------------------

    def discover(self) -> list[tuple[str, TranscriptFile]]:
        return discover(self.options, self._checkpoints)

    def backfill(self, progress: Callable[[int, int], None] | None = None,
                 close_all: bool = False, groups: list[Group] | None = None, final: bool = True) -> int:
        """Read every transcript once (from its checkpoint). Returns how many turns stay open.

        Files are read session by session (main file, then its subagents) and each finished
        session's state is dropped, so memory does not grow with history. ``groups``: only these
        sessions (a worker's shard, catchup.py); ``final=False``: the catch-up is not complete
        when this returns (events are not counted from here on).
        """
        self._complete = close_all
        if groups is None:
            groups = session_groups(self.discover(), self._checkpoints)
        total = sum(unread_bytes(tf.path, self._checkpoints) for group in groups for _, tf in group)
        done = 0
        for group in groups:
            for root, tf in group:
                state = self._track(root, tf)
                before = state.tailer.offset
                self._read(state, accept_unterminated=True, live=False)
                done += max(state.tailer.offset - before, 0)
                if progress is not None:
                    progress(done, total)
            self._flush_group(group, close_all)
            self.process_acks()
        kept = self.assembler.flush(None if close_all else self.clock(), alive=self._alive)
        self._emit()
        self._complete = False
        if not final:
            self.process_acks()
            return kept
        self.caught_up = True
        if "caught_up" not in self._marks:
            self._marks.add("caught_up")  # from now on, and after any restart, events are counted
            self._new_marks.append(("caught_up", PERMANENT))
        self.process_acks()
        return kept

    def _flush_group(self, group: list[tuple[str, TranscriptFile]], close_all: bool) -> None:
        sessions = {tf.session_id for _, tf in group if tf.session_id}
        if any(tf.kind is FileKind.FLAT_AGENT for _, tf in group):
            return  # 2.0.x flat agent files name their session only inside: keep it to the end
        for sid in sessions:
            self.assembler.flush(None if close_all else self.clock(), session_id=sid, alive=self._alive)
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
        """Pick up files the watcher missed; forget files Claude Code's cleanup deleted."""
        for root in self.options.roots:
            for tf in scan(root):
                if tf.path not in self.files:
                    state = self._track(root, tf)
                    self._read(state, accept_unterminated=False)
        self.forget([p for p in self.files if not os.path.exists(p)])
        self._emit()

    def forget_gone(self) -> None:
        """Forget the transcripts deleted while ccotel did not run (Claude Code's cleanupPeriodDays
        sweep): only under a root that is there (an unmounted root is not a sweep)."""
        if self.state is None:
            return
        roots = [r.rstrip(os.sep) + os.sep for r in self.options.roots if os.path.isdir(r)]
        logs = {path for path, _ in self.options.orchestrator_logs}
        gone = [p for p in self.state.files() if p not in logs and p not in self.files and
                any(p.startswith(r) for r in roots) and not os.path.lexists(p)]
        if gone:
            self.forget(gone)
            log.info("forgot the checkpoints of %d transcripts that no longer exist", len(gone))

    def forget_deleted(self, paths: Iterable[str]) -> None:
        """Files (or directories of them) the watcher saw deleted."""
        gone: list[str] = []
        for path in paths:
            if not os.path.lexists(path):
                prefix = path.rstrip(os.sep) + os.sep
                gone += [p for p in self.files if p == path or p.startswith(prefix)]
        self.forget(gone)

    def forget(self, paths: Iterable[str]) -> None:
        """These transcripts were deleted (Claude Code's cleanup sweep): stop following them and
        forget their checkpoints, and every digest and mark no other file on disk holds (no copy
        of them can come any more), in the state and in memory. So the state, and this process,
        follow what is on disk, not the history."""
        gone = [p for p in dict.fromkeys(paths) if not os.path.lexists(p)]
        if not gone:
            return
        for path in gone:
            st = self.files.pop(path, None)
            self._partial.discard(path)
            self._dirty.discard(path)
            self._ghost_candidates.discard(path)
            if st is not None and st.tf.agent_id is not None:
                self._agent_files.discard((st.tf.session_id, st.tf.agent_id))
        if self.state is None:
            return
        calls, prompts, marks = self.state.held_only_by(gone)
        self.assembler.forget_seen(calls, prompts, keep=self._open_digests())
        self._marks -= marks
        self.state.commit(Commit(forget_files=gone))

    def tick(self) -> None:
        now = self.clock()
        self._absorb_clock_step(now)
        for path in list(self._partial):
            state = self.files.get(path)
            if state is None:
                self._partial.discard(path)
            elif (state.partial_since_ns is not None
                  and now - state.partial_since_ns >= self.options.unterminated_grace_ns):
                self._read(state, accept_unterminated=True)
        self.assembler.tick(now, self._alive)
        self._detect_ghosts(now)
        for log_ in self.logs:
            log_.read(self.metrics, count=True)
        self._emit()
        self.process_acks()

    def _absorb_clock_step(self, now: int) -> None:
        """The wall clock moved forward more than the steady clock since the last tick: a step,
        not hours of silence. Everything that waits for silence is moved forward by the step, so
        no running tool call turns into an orphan and no session into a ghost because of it."""
        if self.elapsed is None:
            return
        steady = self.elapsed()
        last, self._last_tick = self._last_tick, (now, steady)
        if last is None:
            return
        step = (now - last[0]) - (steady - last[1])
        if step < _CLOCK_STEP_NS:
            return
        log.warning("the wall clock stepped forward by %.0f s; not counted as silence", step / 1e9)
        self.assembler.shift_activity(step)
        for st in self.files.values():
            st.changed_ns += step
            if st.partial_since_ns is not None:
                st.partial_since_ns += step

    # -- delivery ----------------------------------------------------------------

    def acknowledge(self, spans: Sequence[SpanRecord], result: ExportResult | None = None) -> None:
        """These spans are final (called from the export thread): the backend took them, or
        ``result.drops`` says how many it rejected (or could not be encoded), by reason. Dropped
        spans will never be delivered either, so checkpoints move past both; only delivered
        ones count in ccotel_spans_exported, the rest in ccotel_spans_dropped by reason.

        Their ids and the counters they feed are committed at once, in one transaction, so a
        crash right after cannot make a restart send them again or count them twice.
        """
        commit = Commit()
        settled: list[int] = []
        with self._ack_lock:
            for span, owner, live in self._released(spans):
                if owner.pending == 0:
                    self._maybe_done.add(owner.token)
                commit.acked.append((span.span_id, owner.token))
                if live:
                    settled.append(span.span_id)
            if self.metrics is not None and settled:
                self.metrics.settle(settled)  # counted when built; now final, so checkpointed
            delivered = len(commit.acked)
            for reason, n in result.drops if result is not None else ():
                n = min(n, delivered)
                delivered -= n
                if self.metrics is not None and n:
                    self.metrics.inc("ccotel_spans_dropped", reason, value=float(n), channel="delivered")
            if self.metrics is not None and delivered:
                self.metrics.inc("ccotel_spans_exported", value=float(delivered), channel="delivered")
            if delivered or result is None:
                self.last_export_ns = self.clock()
            if self.state is not None and commit.acked:
                if self.metrics is not None:
                    commit.counters = self.metrics.snapshot("delivered")
                self.state.commit(commit)

    def process_acks(self) -> None:
        """Move checkpoints past owners whose every span was acknowledged (pipeline thread)."""
        commit = Commit()
        moved: set[str] = set()
        with self._ack_lock:
            work, self._maybe_done = list(self._maybe_done), set()
            while work:
                token = work.pop()
                owner = self._owners.get(token)
                if owner is None or not self._done(owner):
                    continue
                del self._owners[token]
                for path in owner.first_offsets:
                    blocking = self._owners_by_path.get(path)
                    if blocking is not None:
                        blocking.pop(token, None)
                        if not blocking:
                            del self._owners_by_path[path]
                moved.update(owner.first_offsets)
                commit.done_owners.append(token)
                anchors = [anchor_of(p) for p in owner.first_offsets] or [PERMANENT]
                commit.calls.extend((digest64(k), a) for k in owner.call_keys for a in anchors)
                if isinstance(owner, Turn) and owner.prompt_uuid:
                    commit.prompts.extend((digest64(owner.prompt_uuid), a) for a in anchors)
                if owner.parent is not None:
                    work.append(owner.parent.token)  # a subagent finished: its parent turn may be done
        self._checkpoint_offsets(commit, moved)
        commit.marks, self._new_marks = self._new_marks, []
        self._anchor_replays(commit)
        if self.state is not None and not commit.empty():
            if self.metrics is not None:
                commit.counters = self.metrics.snapshot("read")
            self.state.commit(commit)

    def _anchor_replays(self, commit: Commit) -> None:
        """A copy in another file holds the calls and prompts it replays too: they are kept while
        either file is there. Only for what is committed already: a digest of an owner still open
        (a file read again from its start) is committed with that owner, and a row for it now
        would make a restart take the owner's own lines for a copy."""
        self._replays.extend(self.assembler.replays)
        self.assembler.replays.clear()
        if not self._replays:
            return
        open_ = self._open_digests()
        waiting = []
        for kind, digest, path in self._replays:
            if digest in open_:
                waiting.append((kind, digest, path))
            else:
                (commit.calls if kind == "call" else commit.prompts).append((digest, anchor_of(path)))
        self._replays = waiting

    def _open_digests(self) -> set[int]:
        """Digests of the calls and prompts of owners not done yet (not committed)."""
        with self._ack_lock:
            owners = list(self._owners.values())
        out = {digest64(k) for o in owners for k in o.call_keys}
        out.update(digest64(o.prompt_uuid) for o in owners if isinstance(o, Turn) and o.prompt_uuid)
        return out

    def _done(self, owner: Owner, depth: int = 0) -> bool:
        if owner.pending > 0 or owner.unsent or owner.waiting or depth > 16:
            return False
        if not owner.closed and owner.first_offsets:
            return False
        return all(self._done(child, depth + 1) for child in owner.children)

    def _checkpoint_offsets(self, commit: Commit, moved: set[str]) -> None:
        """Offsets of the files read since the last commit, or whose blocking owner just finished."""
        for log_ in self.logs:
            if log_.tailer.offset != log_.saved_offset:
                log_.saved_offset = log_.tailer.offset
                commit.offsets[log_.path] = (log_.tailer.identity, log_.saved_offset, log_.saved_offset)
        paths, self._dirty = self._dirty | moved, set()
        for path in paths:
            st = self.files.get(path)
            if st is None:
                continue
            blocking = self._owners_by_path.get(path)
            safe = min(min(blocking.values()) if blocking else 1 << 62, st.tailer.offset)
            if safe != st.saved_offset or st.read_to != st.saved_read_to:
                st.saved_offset, st.saved_read_to = safe, st.read_to
                commit.offsets[path] = (st.tailer.identity, safe, st.read_to)

    # -- detectors ---------------------------------------------------------------

    def detector_state(self) -> tuple[list[str], list[tuple[str, str, int]]]:
        """What the detectors still wait on: main files with prompts and no response yet, and
        named subagents whose transcript had no line (a catch-up worker hands them over)."""
        ghosts = [p for p in self._ghost_candidates if p in self.files and not self.files[p].has_assistant]
        return ghosts, self.assembler.unseen_agents()

    def adopt_detector_state(self, ghosts: list[str], agents: list[tuple[str, str, int]]) -> None:
        """Watch what catch-up workers read but, running no detectors, could not judge."""
        for path in ghosts:
            st = self.files.get(path)
            if st is not None and not st.has_assistant:
                st.has_user = True
                self._ghost_candidates.add(path)
        self.assembler.expect_agents(agents)

    def _alive(self, session_id: str) -> bool | None:
        """Is the Claude Code process writing this session still running? (sessions/<pid>.json)"""
        now = self.clock()
        if now - self._pids_read_ns > 1_000_000_000:
            self._pids_read_ns = now
            self._pids = read_session_pids(self.options.roots)
        found = self._pids.get(session_id)
        if found is None:
            return None
        if any_alive(found):
            return True
        # Dead per a cached read: a resumed run may have replaced the file since. Act on a fresh one.
        self._pids = read_session_pids(self.options.roots)
        self._pids_read_ns = now
        found = self._pids.get(session_id)
        return None if found is None else any_alive(found)

    def _detect_ghosts(self, now: int) -> None:
        """A main session file that went idle with prompts and no assistant record at all; a
        subagent named by its parent whose transcript never appeared."""
        stall = self.options.timeouts.stall_ns
        for sid, agent_id in self.assembler.missing_agents(now, stall):
            mark = f"missing_agent:{sid}:{agent_id}"
            if (sid, agent_id) in self._agent_files or (None, agent_id) in self._agent_files:
                continue  # its transcript is there (its lines were read before this session state)
            if mark not in self._marks:
                self._marks.add(mark)
                self._new_marks.append((mark, self._anchor_of_session(sid)))
                if self.metrics is not None and self._counting():
                    self.metrics.inc("ccotel_missing_transcripts", "subagent")
        for path in list(self._ghost_candidates):
            st = self.files.get(path)
            if st is None or st.has_assistant:
                self._ghost_candidates.discard(path)
                continue
            mark = f"ghost:{path}"
            if mark in self._marks or now - st.changed_ns < stall:
                continue
            if self._alive(st.tf.session_id or "") is True:
                continue
            self._marks.add(mark)
            self._new_marks.append((mark, anchor_of(path)))
            self._ghost_candidates.discard(path)
            if self.metrics is not None and self._counting():
                self.metrics.inc("ccotel_missing_transcripts", "session")
                self.metrics.inc("ccotel_session_resets", "missing_transcript", "transcript")

    def _anchor_of_session(self, session_id: str) -> int:
        """A session's mark goes with its main file."""
        for path, st in self.files.items():
            if st.tf.session_id == session_id and st.tf.kind is FileKind.MAIN:
                return anchor_of(path)
        return PERMANENT

    # -- internals ---------------------------------------------------------------

    def _classify(self, path: str) -> tuple[str, TranscriptFile] | None:
        for root in self.options.roots:
            if within_root(root, path):
                tf = classify(root, path)
                if tf is not None:
                    return root, tf
        if not any(within_root(r, path) for r in self.options.roots) and \
                any(path.startswith(os.path.join(r, "projects")) for r in self.options.roots):
            self._error("path_outside_root")  # a symlink under the root that leads out of it
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
            ckpt = self._checkpoints.get(tf.path)
            if ckpt is not None:
                ident, offset, read_to = ckpt
                tailer = Tailer(tf.path, offset=offset, identity=ident,
                                max_line_bytes=self.options.max_line_bytes)
            else:
                tailer = Tailer(tf.path, max_line_bytes=self.options.max_line_bytes)
                offset = read_to = 0
            state = _FileState(tf, root, tailer, saved_offset=offset if ckpt else -1,
                               saved_read_to=read_to if ckpt else -1, read_to=read_to, changed_ns=self.clock())
            self.files[tf.path] = state
            self.stats.files += 1
            if tf.agent_id is not None and os.path.exists(tf.path):
                self._agent_files.add((tf.session_id, tf.agent_id))
        return state

    def _meta_changed(self, path: str) -> None:
        transcript = path[: -len(".meta.json")] + ".jsonl"
        found = self._classify(transcript)
        if found is None:
            return
        state = self._track(*found)
        if state.meta_loaded and _mtime_ns(path) == state.meta_mtime_ns:
            return  # a directory walk saw it again: unchanged, already known
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
        state.meta_mtime_ns = _mtime_ns(tf.meta_path)
        if isinstance(meta, dict):
            self.assembler.set_agent_meta(tf.session_id, tf.agent_id, meta, self.clock())

    def _read(self, state: _FileState, accept_unterminated: bool, live: bool = True) -> None:
        """Read new whole lines of a file into the assembler. ``live``: the lines arrive now (their
        arrival time counts as activity); history read during a catch-up has only its timestamps."""
        if not within_root(state.root, state.tf.path):
            self._error("path_outside_root")
            return
        now = self.clock()
        # A last line without its newline is taken, even broken, once its writer is surely gone: the
        # data is known complete (--close-all), or the file has been silent past the stall timeout.
        force = accept_unterminated and (
            self._complete or now - _mtime_ns(state.tf.path) >= self.options.timeouts.stall_ns)
        res = state.tailer.read(accept_unterminated=accept_unterminated, force_tail=force)
        if res.reset:
            self.stats.file_resets += 1
            state.read_to = 0
        for err, end in zip(res.errors, res.error_ends, strict=False):
            if end < 0:  # the file itself (unreadable): once until it reads again
                if not state.unreadable:
                    state.unreadable = True
                    self._error(err)
            else:
                self._error(err, f"{state.tf.path}@{end}", count=end > state.read_to)
        if "unreadable" in res.errors:
            return
        state.unreadable = False
        if res.lines:
            self._load_meta(state)  # before its lines: agentType and the spawning tool call
        capture = self.options.content is not None
        new_bytes = new_lines = 0
        for line in res.lines:
            self.stats.lines += 1
            self.stats.bytes += line.end - line.offset
            fresh = line.end > state.read_to  # not read before a restart
            if fresh:
                new_lines += 1
                new_bytes += line.end - line.offset
            parsed = parse_line(line.data, line.offset, capture)
            for err in parsed.errors:
                self._error(err, f"{state.tf.path}@{line.offset}", count=fresh)
            for entry in parsed.entries:
                self.stats.entries += 1
                for drift in self.drift.observe(entry, line.data):
                    if fresh and self.metrics is not None and self._counting():
                        self.metrics.inc("ccotel_format_unknown", *drift)
                if entry.type == "cost-state":
                    self._reported_cost(state, entry, fresh)
                if rules.is_assistant_record(entry):
                    state.has_assistant = True
                elif entry.type == "user" and not state.has_user:
                    state.has_user = True
                    if state.tf.kind is FileKind.MAIN:
                        self._ghost_candidates.add(state.tf.path)
                self.assembler.add(entry, state.tf, now if live else 0)
        if res.lines:
            state.changed_ns = now
        state.read_to = max(state.read_to, state.tailer.offset)
        if self.metrics is not None and new_lines:
            self.metrics.inc("ccotel_lines_read", value=new_lines)
            self.metrics.inc("ccotel_bytes_read", value=new_bytes)
        state.partial_since_ns = now if _has_partial(state) else None
        if state.partial_since_ns is None:
            self._partial.discard(state.tf.path)
        else:
            self._partial.add(state.tf.path)
        self._dirty.add(state.tf.path)

    def _reported_cost(self, state: _FileState, e: Entry, fresh: bool) -> None:
        """Claude Code's own cost (2.1.3xx cost-state lines: a running total per process and model)
        counted as increments, beside ccotel's estimate. The total before this line is remembered,
        or after a restart found in the file itself, so a restart never counts a process twice."""
        if not e.reported_costs or e.process_start is None:
            return
        key = (e.session_id or state.tf.session_id or "", e.process_start)
        prev = self._cost_seen.get(key)
        if prev is None:
            prev = _previous_costs(state.tf.path, e.offset, e.process_start, self.options.max_line_bytes)
        if len(self._cost_seen) > 10_000:
            self._cost_seen.clear()
        self._cost_seen[key] = dict(e.reported_costs)
        if not fresh or self.metrics is None or not self._counting():
            return
        for model, total in e.reported_costs:
            before = prev.get(model, 0.0)
            delta = total - before if total >= before else total  # a process that started again from 0
            if delta > 0:
                self.metrics.inc("ccotel_reported_cost_usd", model, value=delta)

    def _emit(self) -> None:
        with self._ack_lock:
            for owner in self.assembler.new_owners:
                self._register(owner)
        self.assembler.new_owners.clear()
        finished = self.assembler.drain()
        if not finished:
            return
        spans = []
        with self._ack_lock:
            for f in finished:
                owner = _owner_of(f)
                self._register(owner)  # also when nothing is sent: a closed owner may now be done
                if self.options.since_ns is not None and _start_of(f) < self.options.since_ns:
                    self.stats.skipped_before_since += 1
                    continue
                for span in build_spans(f, self.options.content, self.options.conventions, self.options.pricing):
                    if span.span_id in self._acked_before:
                        self.stats.resent_skipped += 1  # delivered before a restart
                        continue
                    owner.pending += 1
                    self._inflight[span.span_id] = (owner, owner.live)
                    spans.append(span)
                    if self.metrics is not None and owner.live:
                        self.metrics.observe_span(span, span.span_id)  # counted now, not on delivery
        if spans:
            self.stats.spans += len(spans)
            if self.emit(spans) is False:
                self._unsent(spans)

    def _released(self, spans: Iterable[SpanRecord]) -> Iterator[tuple[SpanRecord, Owner, bool]]:
        """The spans of these that were in flight, with their owner (one span fewer pending) and
        whether it counts; the caller holds the ack lock."""
        for span in spans:
            found = self._inflight.pop(span.span_id, None)
            if found is None:
                continue
            owner, live = found
            owner.pending -= 1
            yield span, owner, live

    def _unsent(self, spans: list[SpanRecord]) -> None:
        """The trace queue is full (the backend is away): reading and counting go on, the spans
        are let go. Their owners hold the trace cursor (the file checkpoints) where it is, and
        ``traces_behind`` tells the runner to read them again once the backend has caught up."""
        with self._ack_lock:
            for _span, owner, live in self._released(spans):
                owner.unsent = True
                if not live:
                    self.not_live.add(owner.token)
            if self.metrics is not None:
                self.metrics.let_go(s.span_id for s in spans)
        self.traces_behind = True

    def _register(self, owner: Owner) -> None:
        """Track an owner until it is done: its first line in each file holds that file's checkpoint."""
        if owner.token not in self._owners:
            self._owners[owner.token] = owner
            owner.live = owner.live or (self._counting() and owner.token not in self.not_live)
        for path, off in owner.first_offsets.items():
            self._owners_by_path.setdefault(path, {})[owner.token] = off
        self._maybe_done.add(owner.token)

    def _counting(self) -> bool:
        """Events are counted once ccotel has caught up, or from the start after a restart."""
        return self.caught_up or "caught_up" in self._marks

    def _error(self, reason: str, where: str | None = None, count: bool = True) -> None:
        self.stats.errors[reason] += 1
        if count and self.metrics is not None:
            self.metrics.inc("ccotel_parse_errors", reason)
        if reason not in self._logged_errors:
            self._logged_errors.add(reason)
            log.warning("skipped bad input (%s)%s; counted, further ones not logged", reason,
                        f" at {where}" if where else "")

    def gauges(self) -> dict[str, float]:
        """Read by the metrics server's thread while the pipeline thread reads files: it works on
        a copy of the file list (one atomic call) and on values the pipeline thread publishes."""
        lag = 0.0
        now = self.clock()
        for st in list(self.files.values()):
            if st.partial_since_ns is None and _size(st.tf.path) > st.tailer.offset:
                written = _mtime_ns(st.tf.path)
                if written >= self.started_ns:  # history waiting for a catch-up is not lag
                    lag = max(lag, (now - written) / 1e9)
        return {
            "ccotel_files_watched": float(len(self.files)),
            "ccotel_stalled_turns_open": float(self.assembler.stalled_now()),
            "ccotel_last_export_success_timestamp_seconds": self.last_export_ns / 1e9,
            "ccotel_ingest_lag_seconds": max(lag, 0.0),
        }


def _declare_series(metrics: Metrics, options: Options) -> None:
    """Series alerts watch start at 0, so the first event is an increase Prometheus can see."""
    for reason in ("missing_transcript", "orphaned_tool_use"):
        metrics.inc("ccotel_session_resets", reason, "transcript", value=0.0)
    metrics.inc("ccotel_missing_transcripts", "session", value=0.0)
    metrics.inc("ccotel_missing_transcripts", "subagent", value=0.0)
    metrics.inc("ccotel_stalled_turns", "killed", value=0.0)
    for _path, source in options.orchestrator_logs:
        metrics.inc("ccotel_session_resets", "missing_transcript", source, value=0.0)
        metrics.inc("ccotel_aborts", "abort", source, value=0.0)
        metrics.inc("ccotel_watchdog_kills", source, value=0.0)


_CLOCK_STEP_NS = 30_000_000_000  # a wall clock ahead of the steady one by this much since the last tick


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


def _owner_of(f: Finished) -> Owner:
    item = f.item
    if isinstance(item, (Turn, AgentRun)):
        return item
    assert item.owner is not None
    return item.owner


def _start_of(f: Finished) -> int:
    return _owner_of(f).start_ns


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


def discover(options: Options, checkpoints: Mapping[str, _Checkpoint]) -> list[tuple[str, TranscriptFile]]:
    """Every transcript under the roots (with --since: those written since, or already followed)."""
    found = []
    for root in options.roots:
        for tf in scan(root):
            if options.since_ns is not None and _mtime_ns(tf.path) < options.since_ns and tf.path not in checkpoints:
                continue
            found.append((root, tf))
    return found


def unread_bytes(path: str, checkpoints: Mapping[str, _Checkpoint]) -> int:
    return max(_size(path) - checkpoints.get(path, (None, 0, 0))[1], 0)


def session_groups(files: list[tuple[str, TranscriptFile]],
                   checkpoints: Mapping[str, _Checkpoint] | None = None) -> list[Group]:
    """Main file + subagent files of one session together; a project with 2.0.x flat agent
    files is one group (their session is only named inside them). With ``checkpoints``, groups
    with nothing left to read come first, in no particular order (their files are not opened)."""
    groups: dict[tuple[str, str, str | None], Group] = {}
    flat_projects = {(root, tf.project) for root, tf in files if tf.kind is FileKind.FLAT_AGENT}
    for root, tf in files:
        key = (root, tf.project, None if (root, tf.project) in flat_projects else tf.session_id)
        groups.setdefault(key, []).append((root, tf))
    for group in groups.values():
        group.sort(key=lambda rt: (rt[1].kind is not FileKind.MAIN, rt[1].path))
    # Oldest session first: when a session's history was copied into a new session file, the
    # original (same first line, but it ends earlier) is read first and keeps its traces and
    # usage; ccotel counts each API call once.
    def order(group: Group) -> tuple[int, int]:
        if checkpoints is not None and not any(unread_bytes(tf.path, checkpoints) for _, tf in group):
            return (0, 0)
        return _time_span(group[0][1].path)

    return sorted(groups.values(), key=order)


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
    first_stamps, last_stamps = _timestamps(head), _timestamps(tail)
    first = first_stamps[0] if first_stamps else 0
    return (first, last_stamps[-1] if last_stamps else first)


def _timestamps(chunk: bytes) -> list[int]:
    out = []
    for line in chunk.split(b"\n"):
        i = line.find(b'"timestamp":"')
        if i >= 0:
            ts = parse_timestamp(line[i + 13: i + 53].split(b'"', 1)[0].decode("ascii", "replace"))
            if ts is not None:
                out.append(ts)
    return out
