"""Runner: the loops that drive the pipeline, and how they stop.

``wire`` builds one pipeline with its export queue, state and ledger: the same for ``ccotel
run``, ``ccotel backfill`` and each catch-up worker (catchup.py). ``read_history`` reads what the
checkpoints leave (stoppable between files), ``follow`` follows the files live until a signal,
``catch_up_traces`` reads again from the trace cursor once the trace backend has caught up.

Stopping: SIGINT and SIGTERM are honoured in every phase (``Stopper``); the process is gone
within ``STOP_GRACE_S`` whatever it was doing, checkpoints as last written.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccotel import __version__
from ccotel.export.sinks import ExportQueue, make_sink
from ccotel.metrics import events
from ccotel.metrics.counters import Metrics
from ccotel.read.discover import Checkpoint
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline, session_groups
from ccotel.run.stopping import EXIT_ERROR, EXIT_LOCKED, STOP_GRACE_S, Interrupted, Stopper, die, settle_state
from ccotel.store.backends import open_state
from ccotel.store.ledger import FILLING_CATCH_UP, FILLING_REBUILD, LEDGER_FILE, Ledger, LedgerError
from ccotel.store.ledger_recovery import open_or_rebuild
from ccotel.store.sqlite import SqliteState
from ccotel.store.state import State, StateLock, host_id, is_url

if TYPE_CHECKING:
    from ccotel.read.watch import Watcher
    from ccotel.run.livefirst import LiveFirst
    from ccotel.run.status import StatusLine  # watchdog: not loaded by catch-up workers, which never watch

__all__ = ["Wired", "wire", "fill_ledger", "read_history", "wait_for_backend", "catch_up_traces", "follow", "Stopper",
           "Interrupted", "die", "settle_state", "EXIT_ERROR", "EXIT_LOCKED", "STOP_GRACE_S"]

log = logging.getLogger("ccotel")

# Following live, the state and the ledger are written at most this often (a transaction per
# small read cost more CPU than the lines): a SIGKILL sends again at most this much, same ids.
# Each commit has a fixed cost (the ledger's and the state's transactions, the counters' snapshot)
# on the thread that polls: 0.5 s saved a little of the live-CPU replay's CPU, but a commit holding
# 0.5 s of lines delayed the lines behind it (a worse p99 while busy), so the interval stays short.
COMMIT_EVERY_S = 0.2
# While lines arrive, what only time finishes (quiet turns, stalls, detectors) is looked at no
# more often than this: poll emits what the lines finished, so appends wait for no tick.
TICK_EVERY_S = 0.1
# While lines arrive fast, polls are at least this far apart (see _gather): the most an append
# waits for, only when another came within this time before it.
POLL_GAP_S = 0.02
# While a heavy stream lasts (the last poll read lines at BUSY_LINES_PER_S or more since the one
# before), polls are BUSY_POLL_GAP_S apart: the same lines in fewer, larger batches cost less CPU
# (each poll has fixed costs: a read per file, an export request; and work done in 20 ms bursts
# runs on cold caches: the same parse and assemble calls took more CPU than in a backfill). An
# append then waits up to 200 ms, only while such a stream lasts (dozens of sessions writing at
# once: a trace backend shows a span 0.2 s later; bench/NOTES.md has what the wider gap saved).
# A rate, not lines per poll: a wider gap gathers more lines per poll, which must not keep it wide
# once the stream slows.
BUSY_LINES_PER_S = 800
BUSY_POLL_GAP_S = 0.2


def poll_gap(lines: int, since_s: float) -> float:
    """The least time between this poll and the next: ``lines`` read by this poll, ``since_s``
    after the one before started."""
    return BUSY_POLL_GAP_S if lines >= BUSY_LINES_PER_S * max(since_s, POLL_GAP_S) else POLL_GAP_S


# -- wiring -------------------------------------------------------------------------


@dataclass(frozen=True)
class Wired:
    pipeline: Pipeline
    queue: ExportQueue
    state: State | None
    ledger: Ledger | None

    def close(self, wait_s: float | None = None) -> None:
        """``wait_s``: how long the ledger's totals may still take (Ledger.close)."""
        if self.ledger is not None:
            self.ledger.close(wait_s)


def wire(options: Options, exporter: str, state_dir: str | None, metrics: Metrics | None = None,
         stopper: Stopper | None = None, keep_reading: bool = False, verify: bool = True,
         host: str | None = None, checkpoints: dict[str, Checkpoint] | None = None) -> Wired:
    """One pipeline: its export queue, its state and usage ledger (both under ``state_dir``, a
    dir or a ``postgresql://`` URL shared by a fleet, where ``host`` is this host's id; None:
    neither), acknowledgements wired back. ``keep_reading``: a full trace queue does not
    stop reading and counting (``run``); the spans that did not fit are read again from the trace
    cursor once the backend caught up. ``verify``: check the state database at open (a catch-up
    worker opens one its parent checked). ``checkpoints``: Pipeline's (a worker's part's files)."""
    sink = make_sink(exporter)
    state = open_state(state_dir, host, verify=verify) if state_dir is not None else None
    if state is not None and metrics is not None:
        state.on_error = lambda reason: events.checkpoint_failed(metrics, reason)
    ledger = _ledger(state_dir, options.roots, host)
    queue = ExportQueue(sink, notify=lambda msg: log.warning("%s", msg),
                        on_failure=(lambda: events.export_failed(metrics)) if metrics else None)
    if stopper is not None:
        stopper.wakers.append(queue.drop_unsent)
        queue.on_closed = stopper.stdout_closed  # the console's pipe closed (`| head`): stop, quietly
    pipeline = Pipeline(options, emit=_emitter(queue, keep_reading), state=state, metrics=metrics, ledger=ledger,
                        checkpoints=checkpoints)
    queue.on_ack = pipeline.acknowledge
    return Wired(pipeline, queue, state, ledger)


def _ledger(state_dir: str | None, roots: tuple[str, ...], host: str | None = None) -> Ledger | None:
    if state_dir is None:
        return None
    try:
        if is_url(state_dir):
            from ccotel.store.postgres_ledger import PgLedger

            return PgLedger(state_dir, host_id(host), roots)
        return Ledger.in_state_dir(state_dir, roots)
    except LedgerError as exc:
        log.error("the usage ledger cannot be used (%s); reports will read the transcripts only", exc)
        return None


def fill_ledger(options: Options, state_dir: str | None, stopper: Stopper) -> None:
    """A writer's start: the ledger is checked (a damaged one is set aside and a new one started:
    ledger_recovery.py) and, when it lacks history the state's checkpoints have passed (a state
    that predates it, a ledger set aside, a fill stopped before its end), filled from the
    transcripts still on disk before anything is recorded in it. A ledger started with a fresh
    state is filled by the first catch-up. Either way it is marked as filling until that ends
    (reports then read every transcript). Stoppable between files (the next start fills it again)."""
    if state_dir is None or is_url(state_dir):
        return  # a PostgreSQL state was never without its ledger
    try:
        ledger, aside = open_or_rebuild(os.path.join(state_dir, LEDGER_FILE), options.roots)
    except LedgerError as exc:
        log.error("the usage ledger cannot be used (%s); reports will read the transcripts only", exc)
        return
    try:
        checkpoints: dict[str, object] = {}
        if os.path.exists(os.path.join(state_dir, "state.db")):
            state = SqliteState(state_dir)
            checkpoints = dict(state.files())
            state.close()
        cover = ledger.coverage()
        new = ledger.created or aside is not None
        if not checkpoints:  # a first start: the catch-up fills the ledger with the state
            if new:
                ledger.filling(FILLING_CATCH_UP)
            return
        if not (new or cover.filling == FILLING_REBUILD or not cover.updated_ns):
            return
        ledger.filling(FILLING_REBUILD)
        why = "in place of the damaged one" if aside else "a fill was stopped" if cover.filling else "a state before it"
        log.info("filling the usage ledger from the transcripts (%s)", why)
        filler = Pipeline(options, emit=lambda _spans: None, state=None, ledger=ledger)
        filler.backfill(lambda _done, _total: stopper.check(), close_all=True)
        log.info("usage ledger: %d API calls", ledger.coverage().calls)
    finally:
        ledger.close()


def _emitter(queue: ExportQueue, keep_reading: bool) -> Callable[[list[SpanRecord]], bool]:
    if not keep_reading:
        return queue.submit  # blocks while the queue is full
    return lambda spans: queue.submit(spans, block_s=0.0)


def describe(wired: Wired, exporter: str) -> None:
    roots = ", ".join(wired.pipeline.options.roots)
    log.info("ccotel %s reading %s; traces go to %s%s", __version__, roots, wired.queue.sink.describe(),
             "" if exporter != "otlp" else " (kept in order and retried until a backend answers)")


# -- phases -------------------------------------------------------------------------


def read_history(wired: Wired, progress: Callable[[int, int], None] | None, stopper: Stopper,
                 close_all: bool = False, live: LiveFirst | None = None) -> int:
    """pipeline.backfill, stoppable between files. Interrupted: the export thread is stopped
    after the batch it sends (acknowledged ids are committed by on_ack) and no further offsets
    are checkpointed: the session being read was not handed to the exporter yet, so its lines
    must not be passed over; a restart reads it again and skips the spans already delivered.
    ``live``: the live sessions are read first and followed between sessions (livefirst.py)."""
    stopper.hard = True  # until the first file is read, nothing is checkpointed by this thread
    pipeline = wired.pipeline
    try:
        if live is None:
            kept = pipeline.backfill(progress, close_all=close_all)
        else:
            groups = live.order(session_groups(pipeline.discover(), pipeline.checkpoints), pipeline.checkpoints)
            kept = pipeline.backfill(progress, close_all=close_all, groups=groups, between=live.between)
            live.end()
    except Interrupted:
        wired.queue.abandon(stopper.deadline(0.8))
        wired.pipeline.keep_own_counts()
        raise
    stopper.hard = False
    return kept


def wait_for_backend(queue: ExportQueue, stopper: Stopper) -> None:
    """Until every span is delivered (the backend may be down: then this waits), or a stop."""
    if queue.pending():
        log.info("waiting for the trace backend to take %d spans", queue.pending())
    while not queue.flush(timeout_s=0.1):
        stopper.check()
    stopper.check()


def catch_up_traces(old: Pipeline, queue: ExportQueue, metrics: Metrics | None) -> Pipeline:
    """The trace queue overflowed while the backend was away, and it has now taken everything
    queued: read again from the trace cursor (the file checkpoints) with a fresh pipeline on the
    same state, as a restart would. Spans the backend has are skipped; counts not final yet are
    dropped and counted again from the lines, so nothing is lost or counted twice; history that
    was not counted stays uncounted."""
    old.process_acks()
    if metrics is not None:
        metrics.drop_pending()
    new = Pipeline(old.options, emit=_emitter(queue, True), clock=old.clock, state=old.state, metrics=metrics,
                   ledger=old.ledger)
    new.not_live = set(old.not_live)
    new.registries = old.registries  # what is in flight, and the processes seen running
    new.hooks = old.hooks  # the hook events read (committed with the old pipeline's last commit), not read again
    queue.on_ack = new.acknowledge
    new.backfill()
    new.adopt_detector_state(*old.detector_state())
    new.go_live(COMMIT_EVERY_S)
    log.info("trace backend caught up: read %d files again from the trace cursor, %d spans", new.stats.files,
             new.stats.spans)
    return new


def _gather(watcher: Watcher, dirty: set[str], last_poll: float, gap_s: float) -> float:
    """Lines written fast come as one event per write, and every read of a file has a fixed cost
    (stat, identity, open) larger than its lines': a poll follows the last one by at least
    ``gap_s`` (poll_gap), gathering what else changed meanwhile. A lone append (the last poll long past)
    waits for nothing. A watcher that spaces its batches so itself (inotify) is not waited for
    again: two gaps out of phase would add up in an append's wait. Returns the time this poll
    starts."""
    if watcher.spaces_batches:
        return time.monotonic()
    wait = gap_s - (time.monotonic() - last_poll)
    if wait > 0:
        time.sleep(wait)
        dirty |= watcher.wait(0.0)
    return time.monotonic()


def follow(wired: Wired, watcher: Watcher, stopper: Stopper, metrics: Metrics, status: StatusLine | None,
           lock: StateLock | None = None) -> int:
    """Follow the files live until a signal; then let the batch on the wire be acknowledged,
    checkpoint, and return the exit status. ``status``: the terminal's status line the live
    counts are drawn on every second (None: none). ``lock``: the state's lock, checked every
    second: taken from under this process, it stops (EXIT_ERROR) as for a signal."""
    pipeline, queue, state = wired.pipeline, wired.queue, wired.state
    current = [pipeline]  # replaced when the traces catch up
    metrics.gauges = lambda: {**current[0].gauges(), "ccotel_export_queue_spans": float(queue.pending()),
                              "ccotel_checkpoint_pending": float(state.pending if state is not None else 0)}
    pipeline.go_live(COMMIT_EVERY_S)
    last_rescan = last_status = last_retry = last_lock = time.monotonic()
    last_tick = last_poll = 0.0
    gap = POLL_GAP_S
    while not stopper.is_set():
        dirty = watcher.wait(0.25)
        if dirty:
            previous, last_poll = last_poll, _gather(watcher, dirty, last_poll, gap)
            lines = pipeline.stats.lines
            pipeline.poll(sorted(dirty))
            next_gap = poll_gap(pipeline.stats.lines - lines, last_poll - previous)
            if next_gap != gap:
                gap = next_gap
                watcher.space_batches(gap)
            gone = watcher.take_gone()
            if gone:
                pipeline.forget_deleted(gone)
        for exc in watcher.take_unreadable():  # left unwatched, the rest on inotify: counted as the scan does
            pipeline.unreadable_dir(exc)
        if not dirty or time.monotonic() - last_tick >= TICK_EVERY_S:
            last_tick = time.monotonic()
            pipeline.tick()
        if pipeline.traces_behind and queue.pending() == 0 and queue.down_since is None:
            pipeline = current[0] = catch_up_traces(pipeline, queue, metrics)
        now = time.monotonic()
        if state is not None and state.failures and now - last_retry > 1:
            last_retry = now
            state.retry()  # a full disk: the next commit may be a while away
        if lock is not None and now - last_lock > 1:
            last_lock = now
            lost = lock.check()
            if lost is not None:
                log.error("%s", lost)
                stopper.give_up("the state was taken from under this ccotel")
                break
        if now - last_rescan > 120:  # a safety net: inotify reports new files and directories
            last_rescan = now
            watcher.ensure_roots()
            pipeline.rescan()
        if status is not None and now - last_status > 1:
            last_status = now
            st = pipeline.stats
            down = ", backend DOWN, holding" if queue.down_since else ""
            status.show(f"live: {st.files} files, {st.lines} lines, {queue.exported} spans sent,"
                        f" {queue.pending()} pending{down}")
    # Stopped: what the backend takes within the first part of the grace period is checkpointed;
    # the rest is not sent (its lines are read again after a restart). A second signal ends it at once.
    log.log(logging.DEBUG if stopper.closed else logging.INFO, "%s: stopping", stopper.why())
    watcher.stop()
    if status is not None:
        status.done()
    queue.flush(timeout_s=max(stopper.deadline(0.45) - time.monotonic(), 0.0))
    queue.abandon(stopper.deadline(0.7))
    pipeline.process_acks()
    written = settle_state(state, stopper.deadline(0.85))
    return 0 if written and stopper.reason is None else EXIT_ERROR
