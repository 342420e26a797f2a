"""The data flow, wired: discover -> read -> assemble -> spans -> deliver -> checkpoint.

Where a line of transcript becomes a span: ``Reader.read`` (reader.py) parses each whole line
(parse.py) and adds its entries to the ``Assembler`` (assemble/), which rebuilds the
parentUuid tree into turns, API calls, tool calls and subagent runs. What the assembler has
finished is drained in ``Pipeline._emit``, turned into spans by ``build_spans`` (spans/build.py),
handed to the ``Delivery`` (delivery.py: in flight, acknowledged, checkpoints) and emitted to
the export queue. The ``Detectors`` (detectors.py) count what no span stands for.

``Pipeline`` does no waiting of its own: ``backfill`` reads everything once; ``poll`` reads what
a watcher reported; ``tick`` closes what time has finished and runs the detectors;
``acknowledge`` (any thread) takes the batches the backend accepted and ``process_acks`` (the
pipeline's thread) moves the checkpoints. The loops that drive it are in runner.py.

Following live (``go_live``), lines come a few at a time and one SQLite transaction per batch
(checkpoints, acknowledged ids, ledger rows) cost more than reading them: the ledger rows and the
state are then written together at most every ``commit_every_s`` from ``tick``, the ledger first
(a span acknowledged in the state is never read again, so its rows must be in the ledger by
then), and at once by every other ``process_acks`` call (stop, catch-up, tests).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ccotel.assemble.assembler import Assembler
from ccotel.assemble.closing import Timeouts
from ccotel.assemble.model import AgentRun, Call, Correction, Finished, Owner, Turn
from ccotel.export.result import ExportResult
from ccotel.metrics import events
from ccotel.metrics.counters import DEFAULT_MAX_LABEL_VALUES, Metrics
from ccotel.read.discover import Checkpoint, PathNotUtf8, ScanCache, find, scan, session_groups, unread_bytes
from ccotel.read.shard import Group
from ccotel.read.tree import walk
from ccotel.records import BadInput, FileKind, SpanRecord, TranscriptFile
from ccotel.rules import transcript as rules
from ccotel.run.cyclic_gc import fewer_collections
from ccotel.run.delivery import Delivery
from ccotel.run.detectors import Detectors
from ccotel.run.reader import FileState, Reader, ReadStats
from ccotel.run.usage import UsageRecorder
from ccotel.sources.hooks.follower import HookSpool
from ccotel.sources.orchestrator import DEFAULT_PATTERNS, Pattern
from ccotel.sources.registry.follower import Registry
from ccotel.spans.build import DEFAULT_CONVENTIONS, Conventions, build_spans
from ccotel.spans.content import ContentPolicy
from ccotel.spans.correction import correction_span, ledger_span
from ccotel.spans.pricing import DEFAULT_PRICING, Pricing
from ccotel.store.ledger import Ledger
from ccotel.store.state import Commit, State

__all__ = ["Pipeline", "PipelineStats", "Options", "discover", "session_groups", "unread_bytes"]

log = logging.getLogger("ccotel.pipeline")

PipelineStats = ReadStats

_CLOCK_STEP_NS = 30_000_000_000  # a wall clock ahead of the steady one by this much since the last tick


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
    registries: tuple[str, ...] = ()  # orchestrator agent registries followed live (sources/registry/)
    registry_kill_grace_ns: int = 5_000_000_000
    hooks_spool: str | None = None  # the spool `ccotel hook` appends to, followed (sources/hooks/)
    # A catch-up worker's: the spool read from these offsets (the caller's at the catch-up's start)
    # only to put what the hooks said on the spans it builds; the caller counts the events and
    # commits the spool's offsets (catchup.py).
    hooks_annotate_from: Mapping[str, Checkpoint] | None = None
    # How often a backfill commits what the backend acknowledged: a process killed mid-way sends
    # again what was acknowledged since (each commit has a fixed cost: once per session was a sizeable
    # share of a large backfill).
    backfill_commit_every_s: float = 1.0
    # Distinct values of each metric label with series of their own (catch-up workers count with it).
    max_label_values: int = DEFAULT_MAX_LABEL_VALUES


class Pipeline:
    def __init__(self, options: Options, emit: Callable[[list[SpanRecord]], object],
                 clock: Callable[[], int] = time.time_ns, state: State | None = None,
                 metrics: Metrics | None = None, elapsed: Callable[[], int] | None = None,
                 ledger: Ledger | None = None, checkpoints: dict[str, Checkpoint] | None = None) -> None:
        """``ledger``: the usage ledger every span built is recorded in (reports past the sweep).
        ``checkpoints``: where to start reading the files it will read, when the caller knows them
        (a catch-up worker: its part's files only); by default every file's, from ``state``."""
        self.options = options
        self.ledger = ledger
        self.emit = emit
        self.clock = clock
        # A steady clock beside the wall clock tells a step of the wall clock (NTP, a resumed VM)
        # from real silence. By default only with the real wall clock: a test's fake clock moves
        # alone on purpose.
        self.elapsed = elapsed if elapsed is not None else (time.monotonic_ns if clock is time.time_ns else None)
        self._last_tick: tuple[int, int] | None = None
        self.state = state
        self.metrics = metrics
        self.started_ns = clock()
        self.assembler = Assembler(options.timeouts, capture_content=options.content is not None)
        if state is not None:
            self.assembler.preload(*_seen_digests(state))
        stall = options.timeouts.stall_ns
        self.detectors = Detectors(options.roots, self.assembler, clock, metrics, state, stall)
        self.registries = [Registry(d, options.roots, metrics, self.detectors.marks, clock,
                                    options.registry_kill_grace_ns) for d in options.registries]
        if checkpoints is None:
            checkpoints = state.files() if state is not None else {}
        self.checkpoints: dict[str, Checkpoint] = checkpoints
        self.reader = Reader(options.roots, self.assembler, clock, metrics, self.detectors.counting,
                             self.checkpoints, options.content is not None, options.max_line_bytes, stall,
                             options.unterminated_grace_ns)
        self.hooks = _hook_spool(options, self.checkpoints, metrics)
        self.delivery = Delivery(state, metrics, clock)
        self.delivery.not_live |= self.detectors.history_owners()  # read as history: never counted
        self._commit_every_ns = 0  # live: the least time between two commits from tick (go_live)
        self._last_commit_ns = 0
        self.usage = UsageRecorder(ledger, self.reader.stats, metrics)
        self._unreadable_dirs: set[str] = set()
        self._scan_cache = ScanCache()  # the safety rescan lists only directories that changed
        for path, source in options.orchestrator_logs:
            self.reader.follow_log(path, source, options.orchestrator_patterns)
        if metrics is not None:
            if state is not None:
                metrics.restore(state.counters())
            _declare_series(metrics, options)

    # What the runner and the tests look at, kept where each stage keeps it.
    @property
    def files(self) -> dict[str, FileState]:
        return self.reader.files

    @property
    def stats(self) -> ReadStats:
        return self.reader.stats

    @property
    def caught_up(self) -> bool:
        return self.detectors.caught_up

    @property
    def traces_behind(self) -> bool:
        return self.delivery.traces_behind

    @property
    def not_live(self) -> set[str]:
        return self.delivery.not_live

    @not_live.setter
    def not_live(self, tokens: set[str]) -> None:
        self.delivery.not_live = tokens

    @property
    def last_export_ns(self) -> int:
        return self.delivery.last_export_ns

    def acknowledge(self, spans: Sequence[SpanRecord], result: ExportResult | None = None) -> None:
        """These spans are final (any thread): see Delivery.acknowledge."""
        others = sum(registry.acknowledge(spans) for registry in self.registries)
        self.delivery.acknowledge(spans, result, others=others)

    # -- backfill ----------------------------------------------------------------

    def discover(self) -> list[tuple[str, TranscriptFile]]:
        return discover(self.options, self.checkpoints, self.unreadable_dir, self._scan_cache)

    def backfill(self, progress: Callable[[int, int], None] | None = None,
                 close_all: bool = False, groups: list[Group] | None = None, final: bool = True,
                 between: Callable[[Group], None] | None = None) -> int:
        """Read every transcript once (from its checkpoint). Returns how many turns stay open.

        Files are read session by session (main file, then its subagents) and each finished
        session's state is dropped, so memory does not grow with history. ``groups``: only these
        sessions (a worker's shard, catchup.py); ``final=False``: the catch-up is not complete
        when this returns (events are not counted from here on). ``between``: called after each
        session is read (livefirst.py follows the live sessions there).
        """
        with fewer_collections():  # cyclic_gc.py: a history allocates much and forms few cycles
            return self._backfill(progress, close_all, groups, final, between)

    def _backfill(self, progress: Callable[[int, int], None] | None, close_all: bool, groups: list[Group] | None,
                  final: bool, between: Callable[[Group], None] | None) -> int:
        self.reader.complete = close_all
        self._poll_hooks()  # first: what the hooks said goes on the spans built from here on
        if groups is None:
            groups = session_groups(self.discover(), self.checkpoints)
        total = sum(unread_bytes(tf.path, self.checkpoints) for group in groups for _, tf in group)
        done = 0
        # A history is committed (ledger, then state) about once a second, as live lines are, not
        # once per session: each commit has a fixed cost, and one per session was a sizeable share of a backfill.
        was = self._commit_every_ns, self.delivery.coalesce
        if not self._commit_every_ns:
            self.go_live(self.options.backfill_commit_every_s)
        try:
            for group in groups:
                for root, tf in group:
                    state = self._track(root, tf)
                    before = state.tailer.offset
                    self._read(state, accept_unterminated=True, live=False)
                    done += max(state.tailer.offset - before, 0)
                    if progress is not None:
                        progress(done, total)
                self._flush_group(group, close_all)
                self.process_acks(force=False)
                if between is not None:
                    between(group)
            kept = self.assembler.flush(None if close_all else self.clock(), alive=self.detectors.alive)
            self._emit()
            self.reader.complete = False
            if final:
                self.detectors.catch_up_done(self.delivery.history_in_flight(), self.files)
            self.process_acks()
            if final:
                self.usage.caught_up(aside=between is not None)  # ccotel run: live sessions wait for nothing
        finally:
            # Done or stopped (a signal): acknowledgements kept back since the last commit are
            # committed now, ledger rows first, and from here on as they come; the offsets of
            # what was read after that commit are not (a stopped read must not pass its lines).
            self._commit_every_ns = was[0]
            if not was[1]:
                if self.usage.holding:
                    self.usage.record([])
                self.delivery.stop_coalescing()
        return kept

    def _flush_group(self, group: list[tuple[str, TranscriptFile]], close_all: bool) -> None:
        sessions = {tf.session_id for _, tf in group if tf.session_id}
        if any(tf.kind is FileKind.FLAT_AGENT for _, tf in group):
            return  # 2.0.x flat agent files name their session only inside: keep it to the end
        for sid in sessions:
            self.assembler.flush(None if close_all else self.clock(), session_id=sid, alive=self.detectors.alive)
        self._emit()

    def adopt_state(self, paths: AbstractSet[str] | None = None) -> None:
        """Catch-up workers wrote the state while this pipeline followed the live sessions: take
        their checkpoints (of the files this pipeline does not follow), acknowledged span ids,
        digests and marks, as a pipeline opened after them would (counters: catchup.py).
        ``paths``: only those of these files (a worker's part done while others still read)."""
        if self.state is None:
            return
        some = None if paths is None else sorted(paths)
        for path, ckpt in self.state.files(some).items():
            if path not in self.files:
                self.checkpoints[path] = ckpt
        self.delivery.acked_before |= self.state.acked()
        self.assembler.preload(*(_seen_digests(self.state) if some is None else self.state.held_by(some)))
        self.detectors.marks |= self.state.marks()

    # -- live --------------------------------------------------------------------

    def poll(self, paths: Iterable[str]) -> None:
        """Read what changed. Paths may be files, meta.json files or new directories."""
        for path in paths:
            state = self.files.get(path)
            if state is not None:  # a followed transcript (not a directory: no stat to ask)
                self._read(state, accept_unterminated=False)
                continue
            if os.path.isdir(path):
                self._scan_dir(path)
                continue
            if path.endswith(".meta.json"):
                self.reader.meta_changed(path)
                continue
            found = self.reader.classify(path)
            if found is not None:
                self._read(self._track(*found), accept_unterminated=False)
        self._emit()

    def tick_turns(self) -> None:
        """What time has finished of the open turns (a final answer's quiet, a stall), without the
        detectors, which judge only a history read to its end: livefirst.py, while catching up."""
        self.assembler.tick(self.clock(), self.detectors.alive)
        self._emit()

    def go_live(self, commit_every_s: float) -> None:
        """Following live: commit (state and ledger) at most every ``commit_every_s`` from tick."""
        self._commit_every_ns = int(commit_every_s * 1e9)
        self.delivery.coalesce = True

    def rescan(self) -> None:
        """Pick up files the watcher missed; forget files Claude Code's cleanup deleted."""
        listed = set()
        for root in self.options.roots:
            for tf in scan(root, self.unreadable_dir, self._scan_cache):
                listed.add(tf.path)
                if tf.path not in self.files:
                    state = self._track(root, tf)
                    self._read(state, accept_unterminated=False)
        self.forget([p for p in self.files if p not in listed and not os.path.exists(p)])
        self._emit()

    def tick(self) -> None:
        now = self.clock()
        self._absorb_clock_step(now)
        self._poll_hooks()
        for state in self.reader.partials_due(now):
            self._read(state, accept_unterminated=True)
        self.assembler.tick(now, self.detectors.alive)
        self.detectors.detect(now, self.files)
        self.reader.read_logs()
        self._emit()
        self._send(self.delivery.take_over())  # a fleet: spans of a host whose lease ran out
        self._poll_registries(now)
        self.process_acks(force=False)

    def _poll_hooks(self) -> None:
        if self.hooks is not None:
            self.hooks.poll()

    def _poll_registries(self, now: int) -> None:
        """Registry agents' spans go straight to the export queue: not through the delivery (no
        transcript offset waits on them) nor metrics.observe_span (the registry counts them itself)."""
        for registry in self.registries:
            spans = registry.poll(now)
            if spans and self.emit(spans) is False:
                registry.unsent(spans, now)

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
        self.reader.shift(step)

    # -- deleted files -----------------------------------------------------------

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
        deleted = {path.rstrip(os.sep) for path in paths if not os.path.lexists(path)}
        if not deleted:
            return
        # One pass over the followed files, each looked up with its parent directories: a pass per
        # deleted path made deleting thousands of files quadratic.
        gone = [p for p in self.files if not deleted.isdisjoint(_self_and_parents(p))]
        self.forget(gone)

    def forget(self, paths: Iterable[str]) -> None:
        """These transcripts were deleted (Claude Code's cleanup sweep): stop following them and
        forget their checkpoints, and every digest and mark no other file on disk holds (no copy
        of them can come any more), in the state and in memory. So the state, and this process,
        follow what is on disk, not the history."""
        gone = [p for p in dict.fromkeys(paths) if not os.path.lexists(p)]
        if not gone:
            return
        dropped = [st for st in (self.reader.drop(p) for p in gone) if st is not None]
        marks: set[str] = set()
        if self.state is not None:
            calls, prompts, marks = self.state.held_only_by(gone)
            self.assembler.forget_seen(calls, prompts, keep=self.delivery.open_digests())
        self.detectors.forget(dropped, marks)
        if self.state is not None:
            self.state.commit(Commit(forget_files=gone))

    # -- delivery ----------------------------------------------------------------

    def process_acks(self, force: bool = True) -> None:
        """Move checkpoints past owners whose every span was acknowledged (pipeline thread).
        ``force=False``: not if the last commit was less than ``go_live``'s interval ago
        (everything waits as it is: the next commit writes it)."""
        now = time.monotonic_ns()
        if not force and now - self._last_commit_ns < self._commit_every_ns:
            return
        self._last_commit_ns = now
        if not self.usage.record([]):  # the rows held since the last commit
            return  # the checkpoints wait for their ledger rows: a line passed in the state is never read again
        commit = Commit()
        # Done owners first, the acknowledgements kept back last, just before the write: one
        # that lands in between (export thread) is then in this commit, and an owner it makes
        # done waits for the next. The other order could commit an owner done (its offset moved
        # past, its ids dropped) without its last span's id and count, which a kill before the
        # next commit lost; and acknowledgements taken early would be lost by anything raising
        # before the write, while a later commit of the counters held their counts.
        moved = self.delivery.finish_owners(commit)
        self.delivery.checkpoint_offsets(commit, moved, self.reader)
        commit.marks = self.detectors.take_marks()
        if self.hooks is not None and self.options.hooks_annotate_from is None:
            self.hooks.take_commit(commit)
        for registry in self.registries:
            marks, gone = registry.take_commit()
            commit.marks += marks
            commit.forget_files += gone
        replays, self.assembler.replays = self.assembler.replays, []
        self.delivery.anchor_replays(commit, replays)
        self.delivery.take_acked(commit)
        self.delivery.write(commit)

    def keep_own_counts(self) -> None:
        """Stopped where no offset may move (a catch-up interrupted): commit the "own" counters
        alone (failed exports and checkpoint writes), which no line read again would count."""
        self.delivery.write(Commit())

    def _emit(self) -> None:
        """Spans for what the assembler finished: built, handed to the delivery, emitted."""
        counting = self.detectors.counting()
        for owner in self.assembler.new_owners:
            self.delivery.register(owner, counting)
        self.assembler.new_owners.clear()
        finished = self.assembler.drain()
        if finished:
            self._build(finished, counting)
        for correction in self.assembler.drain_corrections():
            self._correct(correction, counting)

    def _build(self, finished: list[Finished], counting: bool) -> None:
        """Spans of ``finished``, which it empties: each item is let go once its spans are built,
        so a session's calls and tool calls are not held beside all of their spans (a backfill
        builds a whole session at once)."""
        spans: list[SpanRecord] = []
        built_all: list[SpanRecord] = []
        batch: list[tuple[Owner, list[SpanRecord]]] = []
        finished.reverse()  # taken from the end, in the order they finished
        while finished:
            f = finished.pop()
            owner = _owner_of(f)
            self.delivery.register(owner, counting)  # also when nothing is sent: a closed owner may now be done
            if self.options.since_ns is not None and owner.start_ns < self.options.since_ns:
                self.stats.skipped_before_since += 1
                continue
            built = build_spans(f, self.options.content, self.options.conventions, self.options.pricing)
            if isinstance(f.item, Call) and f.item.usage is not None and not f.item.is_api_error:
                self.usage.remember(f.item.key, f.item.usage)
            batch.append((owner, built))
        if self.hooks is not None:  # all of them at once: a session's end goes on the last of its turns here
            self.hooks.annotate([s for _owner, built in batch for s in built])
        for owner, built in batch:
            taken = self.delivery.take(owner, built)
            self.stats.resent_skipped += len(built) - len(taken)  # delivered before a restart
            spans += taken
            built_all += built
        # The ledger records every span built, also those delivered before a restart: their
        # acknowledgement may have been written while their ledger rows were not (a full disk);
        # recording them again changes nothing.
        if built_all:
            if self._commit_every_ns:
                self.usage.hold(built_all)  # written by the next commit, before the acknowledgements
            else:
                self.usage.record(built_all)
        self._send(spans)

    def _send(self, spans: list[SpanRecord]) -> None:
        """Spans in flight, emitted: their ledger rows were recorded when they were built (_emit),
        also those a host held for another until its lease ran out."""
        if spans:
            self.stats.spans += len(spans)
            if self.emit(spans) is False:
                self.delivery.unsent(spans)

    def _correct(self, c: Correction, counting: bool) -> None:
        """A later snapshot of a call whose span went out: if larger than the one counted, the
        counters (ccotel_tokens_total, ccotel_cost_usd_total, ccotel_corrected_tokens_total) and the
        ledger take the difference, once: the correction's id is committed with the counts it fed
        (acknowledged at once, never sent), so a restart that reads the line again skips it. The
        snapshot counted is this process's, else the ledger's (after a restart)."""
        before = self.usage.counted(c.key)
        if before is None or not rules.is_final_snapshot(c.usage, before):
            return
        self.usage.remember(c.key, c.usage)
        self.delivery.register(c.owner, counting)
        row = ledger_span(c, self.options.pricing, self.options.conventions)
        if self._commit_every_ns:
            self.usage.hold([row])
        else:
            self.usage.record([row])
        taken = self.delivery.take(c.owner, [correction_span(c, before, self.options.pricing)])
        if taken:
            self.delivery.acknowledge(taken, exported=False)

    # -- detectors ---------------------------------------------------------------

    def detector_state(self) -> tuple[list[str], list[tuple[str, str, int]]]:
        """What the detectors still wait on (a catch-up worker hands it over)."""
        return self.detectors.detector_state(self.files)

    def adopt_detector_state(self, ghosts: list[str], agents: list[tuple[str, str, int]]) -> None:
        self.detectors.adopt(self.files, ghosts, agents)

    # -- internals ---------------------------------------------------------------

    def _track(self, root: str, tf: TranscriptFile) -> FileState:
        known = tf.path in self.files
        state = self.reader.track(root, tf)
        if not known:
            self.detectors.tracked(state)
        return state

    def _read(self, state: FileState, accept_unterminated: bool, live: bool = True) -> None:
        self.reader.read(state, accept_unterminated, live)
        self.detectors.read(state)

    def _scan_dir(self, path: str) -> None:
        for dirpath, _dirs, names in walk(path, self.unreadable_dir):
            for name in sorted(names):
                full = os.path.join(dirpath, name)
                if full.endswith(".jsonl") and full not in self.files:
                    self.poll([full])
                elif full.endswith(".meta.json") and not self._history_meta(full):
                    self.reader.meta_changed(full)

    def _history_meta(self, meta_path: str) -> bool:
        """The meta.json of a checkpointed transcript this process read no line of (history):
        the reader loads it before that transcript's next lines, as a backfill does. A directory
        walk does not load it: the watcher's first event names the whole tree, and after a
        catch-up by workers every subagent of the history would be rebuilt in the assembler
        for nothing (thousands after a large catch-up, a visible part of ccotel run's peak memory). A new
        transcript's meta (no checkpoint) is loaded by the walk as before."""
        state = self.files.get(meta_path[: -len(".meta.json")] + ".jsonl")
        return (state is not None and not state.meta_loaded and state.saved_offset >= 0
                and state.tailer.offset == state.saved_offset)

    def unreadable_dir(self, exc: OSError) -> None:
        """A directory under a root that cannot be read: its transcripts are not seen. Counted
        once per directory (the safety rescan walks the roots again every few minutes, and the
        watcher reports the directories inotify refused)."""
        where = str(getattr(exc, "filename", None) or exc)
        if where not in self._unreadable_dirs:
            self._unreadable_dirs.add(where)
            self.reader.error(exc.reason if isinstance(exc, PathNotUtf8) else BadInput.UNREADABLE_DIR, where)

    def gauges(self) -> dict[str, float]:
        """Read by the metrics server's thread while the pipeline thread reads files: each value
        is read from a copy or from what the pipeline thread publishes."""
        return {
            "ccotel_files_watched": float(len(self.files)),
            "ccotel_stalled_turns_open": float(self.assembler.stalled_now()),
            "ccotel_last_export_success_timestamp_seconds": self.last_export_ns / 1e9,
            "ccotel_ingest_lag_seconds": self.reader.lag_s(self.clock(), self.started_ns),
            "ccotel_registry_agents_in_progress": sum(r.gauges()["ccotel_registry_agents_in_progress"]
                                                      for r in self.registries),
        }


def discover(options: Options, checkpoints: Mapping[str, Checkpoint],
             on_error: Callable[[OSError], None] | None = None,
             cache: ScanCache | None = None) -> list[tuple[str, TranscriptFile]]:
    """Every transcript under the roots (with --since: those written since, or already followed)."""
    return find(options.roots, options.since_ns, checkpoints, on_error, cache)


def _hook_spool(options: Options, checkpoints: Mapping[str, Checkpoint], metrics: Metrics | None) -> HookSpool | None:
    if not options.hooks_spool:
        return None
    if options.hooks_annotate_from is not None:  # a catch-up worker: nothing counted, nothing committed
        return HookSpool(options.hooks_spool, options.hooks_annotate_from, None)
    return HookSpool(options.hooks_spool, checkpoints, metrics)


def _seen_digests(state: State) -> tuple[Iterable[int], Iterable[int]]:
    """The digests of the calls and prompts delivered before, each in ascending order. SQLite
    reads them so, one at a time; PostgreSQL gives this host's sets, sorted (State.sorted_digests)."""
    return state.sorted_digests("calls"), state.sorted_digests("prompts")


def _declare_series(metrics: Metrics, options: Options) -> None:
    """Series alerts watch start at 0, so the first event is an increase Prometheus can see."""
    events.declare_alerted_series(metrics, (source for _path, source in options.orchestrator_logs))


def _owner_of(f: Finished) -> Owner:
    item = f.item
    if isinstance(item, (Turn, AgentRun)):
        return item
    assert item.owner is not None
    return item.owner


def _self_and_parents(path: str) -> Iterator[str]:
    """The path and each directory above it."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent
