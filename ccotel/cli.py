"""Command line: ``ccotel run | backfill | report``."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, cast

import orjson

from . import __version__
from .assemble import Timeouts
from .content import DEFAULT_REDACTIONS, ContentPolicy
from .discover import default_roots
from .export import ExportQueue, make_sink
from .metrics import Metrics, serve
from .orchestrator import DEFAULT_PATTERNS, load_patterns, parse_log_arg
from .pipeline import Options, Pipeline
from .pricing import DEFAULT_PRICING, Pricing, load_overrides
from .records import SpanRecord
from .shard import default_workers
from .spans import Conventions
from .state import State, StateError, StateLock, StateLocked, default_state_dir, lock_state_dir
from .watch import Watcher

if TYPE_CHECKING:
    from .catchup import CatchUpResult

__all__ = ["main", "build_parser", "parse_since", "Stopper", "Interrupted", "EXIT_ERROR", "EXIT_LOCKED"]

log = logging.getLogger("ccotel")

# Exit status (README, "Running it"): 0 done (backfill) or stopped by a signal once caught up
# (run); killed by SIGINT/SIGTERM (130/143 in a shell) when stopped before its work was done;
# EXIT_ERROR the state cannot be used or a checkpoint could not be written; EXIT_LOCKED
# another ccotel holds the state dir; 2 usage (argparse) or, for check, refused.
EXIT_ERROR = 1
EXIT_LOCKED = 75  # EX_TEMPFAIL: try again once the other one stopped

# After SIGINT/SIGTERM the process is gone within this long, whatever it was doing.
STOP_GRACE_S = 1.75


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Stopper:
    """SIGINT and SIGTERM, honoured in every phase.

    ``hard`` (the default, and while nothing is being checkpointed by this thread: discovery,
    loading the state, starting workers' reads): the handler raises Interrupted at once.
    Otherwise it only sets ``event`` and the code stops at its next ``check()`` (between
    files, every 0.25 s live). Either way each ``wakers`` callable runs (an export queue drops
    its unsent spans so nothing blocks on it), and a watchdog thread ends the process
    ``grace_s`` after the signal if it has not ended by then; a second signal ends it at once.
    The process ends by the signal itself (``die``), so a shell sees 130 / 143 and systemd a
    clean stop."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.event = threading.Event()
        self.signum = 0
        self.at = 0.0  # monotonic time of the first signal
        self.hard = True
        self.wakers: list[Callable[[], None]] = []

    def install(self) -> Stopper:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)
        return self

    def is_set(self) -> bool:
        return self.event.is_set()

    def deadline(self, share: float = 1.0) -> float:
        """A monotonic time ``share`` of the grace period after the signal."""
        return self.at + self.grace_s * share

    def check(self) -> None:
        if self.event.is_set():
            raise Interrupted(self.signum)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.event.is_set():
            die(signum, f"{signal.Signals(signum).name} again: exiting now; checkpoints are as last written")
        self.signum, self.at = signum, time.monotonic()
        self.event.set()
        threading.Thread(target=self._watchdog, name="ccotel-stop", daemon=True).start()
        for wake in self.wakers:
            wake()
        if self.hard:
            raise Interrupted(signum)

    def _watchdog(self) -> None:
        time.sleep(max(self.deadline() - time.monotonic(), 0.0))
        die(self.signum, f"still stopping {self.grace_s:.2f} s after {signal.Signals(self.signum).name}: exiting "
            "now; checkpoints are as last written (a restart reads again what they do not cover)")


def die(signum: int, message: str | None = None) -> None:
    """End this process by ``signum`` (its default action), as an unhandled signal would, from
    any thread; nothing else runs (no atexit, no thread joins). ``message``: a last log line."""
    try:
        if message:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            os.write(2, f"{stamp} ccotel WARNING {message}\n".encode())
        for handler in logging.getLogger().handlers:
            stream = getattr(handler, "stream", None)
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        pass
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        else:  # signal.signal is for the main thread only; libc's is not
            import ctypes

            ctypes.CDLL(None).signal(signum, 0)  # SIG_DFL
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(1.0)
    finally:
        os._exit(128 + signum)


def drop_unsent(queue: ExportQueue) -> None:
    """Forget the spans not sent yet (their lines are not checkpointed: a restart reads them
    again) and wake whatever waits on the queue. A batch being sent is let finish."""
    with queue._cv:  # noqa: SLF001  (ExportQueue has no public way to do this; see the final report)
        queue._q.clear()  # noqa: SLF001
        queue._cv.notify_all()  # noqa: SLF001


def abandon(queue: ExportQueue, until: float) -> bool:
    """Stop the export thread after the batch it is sending (its acknowledgement is committed
    by on_ack), dropping what is unsent; wait for that until the monotonic time ``until``.
    False if the batch was still out then (the backend may take it: a restart may send it again)."""
    with queue._cv:  # noqa: SLF001
        queue._q.clear()  # noqa: SLF001
        queue._stop = True  # noqa: SLF001
        queue._cv.notify_all()  # noqa: SLF001
        while queue._inflight:  # noqa: SLF001
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            queue._cv.wait(timeout=min(remaining, 0.05))  # noqa: SLF001
    queue._thread.join(timeout=max(until - time.monotonic(), 0.0))  # noqa: SLF001
    return True


def settle_state(state: State | None, until: float) -> bool:
    """Write what failed commits left, retrying until ``until``. True if nothing is left."""
    if state is None:
        return True
    while not state.retry():
        if time.monotonic() >= until:
            log.error("%d checkpoint records could not be written (%d attempts); a restart sends the spans "
                      "delivered since the last write again", state.pending, state.failures)
            return False
        time.sleep(0.2)
    return True


def parse_since(value: str, now: float | None = None) -> int:
    """'2025-06-01', an ISO timestamp, or a duration back from now ('7d', '12h', '30m') -> Unix ns."""
    m = re.fullmatch(r"(\d+)([smhdw])", value.strip())
    if m:
        secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return int(((now if now is not None else time.time()) - secs) * 1e9)
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--since: not a date or duration: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1e9)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccotel", description="Claude Code transcripts -> OpenTelemetry traces")
    p.add_argument("--version", action="version", version=f"ccotel {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--root", action="append", default=None,
                        help="Claude config dir to read (repeatable; default $CLAUDE_CONFIG_DIR or ~/.claude)")
        sp.add_argument("--since", type=parse_since, default=None,
                        help="only turns started after this date or duration ago (2025-06-01, 7d, 12h)")
        sp.add_argument("--workers", type=int, default=None,
                        help="processes that read a large history in parallel (default: the cores, at most 4)")
        sp.add_argument("--parallel-min-mb", type=float, default=256.0,
                        help="a history smaller than this (MB to read) is read by one process")
        sp.add_argument("--prices", default=None, metavar="FILE",
                        help="JSON of model -> USD per million tokens, overriding genai-prices' table")
        sp.add_argument("-v", "--verbose", action="store_true")

    def tracing(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--traces-exporter", choices=("otlp", "console", "none"), default="otlp",
                        help="where spans go; otlp uses the standard OTEL_EXPORTER_OTLP_* variables")
        sp.add_argument("--capture-content", action="store_true",
                        help="export prompt and tool input/output text (truncated, redacted); off by default")
        sp.add_argument("--max-attribute-length", type=int, default=4096)
        sp.add_argument("--redact", action="append", default=[], metavar="REGEX",
                        help="extra pattern to redact from captured content (repeatable)")
        sp.add_argument("--stall-timeout", type=float, default=180.0,
                        help="seconds a tool call may go without a result before it counts as orphaned")

    def durable(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--state-dir", default=None,
                        help="checkpoints and counter totals (default $XDG_STATE_HOME/ccotel); 'none' keeps nothing")

    run = sub.add_parser("run", help="catch up on history, then follow transcripts live")
    common(run)
    tracing(run)
    durable(run)
    run.add_argument("--orchestrator-log", action="append", default=[], metavar="PATH[=SOURCE]",
                     help="an orchestrator's log to count resets, aborts and watchdog kills from (repeatable)")
    run.add_argument("--orchestrator-patterns", metavar="FILE",
                     help="JSON list of extra patterns: [{\"metric\", \"regex\", \"reason\"}]")
    run.add_argument("--metrics-addr", default="127.0.0.1:9477",
                     help="host:port for Prometheus /metrics (loopback by default); 'none' to disable")
    run.add_argument("--poll", action="store_true", help="poll instead of inotify")
    run.add_argument("--no-status", action="store_true", help="no live status line")

    bf = sub.add_parser("backfill", help="export history once, then exit")
    common(bf)
    tracing(bf)
    durable(bf)
    bf.add_argument("--close-all", action="store_true",
                    help="close every open turn, even ones whose session may still be running")

    chk = sub.add_parser("check", help="health of one session: exit 1 if it should not be resumed")
    chk.add_argument("session", help="a session id, or the path of its transcript (under a root)")
    chk.add_argument("--root", action="append", default=None)
    chk.add_argument("--json", action="store_true")
    chk.add_argument("--stall-timeout", type=float, default=180.0)
    chk.add_argument("-v", "--verbose", action="store_true")

    rep = sub.add_parser("report", help="token usage and estimated cost per session")
    common(rep)
    rep.add_argument("--json", action="store_true", help="JSON like `ccusage session --json`")

    from . import doctor, relay, sessions, waterfall  # commands whose options live with them

    trc = sub.add_parser("trace", help="a turn's spans as a waterfall in the terminal (no trace backend needed)")
    trc.add_argument("--root", action="append", default=None)
    trc.add_argument("--prices", default=None, metavar="FILE")
    trc.add_argument("-v", "--verbose", action="store_true")
    waterfall.add_arguments(trc)
    ses = sub.add_parser("sessions", help="recent sessions: tokens, cost and state (live, idle, ghost, killed, ...)")
    common(ses)
    sessions.add_arguments(ses)

    doc = sub.add_parser("doctor", help="check roots, versions, state, trace backend, metrics port: exit 1 if any fail")
    common(doc)
    durable(doc)
    doctor.add_arguments(doc)
    rl = sub.add_parser("relay", help="pass `claude -p --output-format stream-json` through and export it live")
    common(rl)
    relay.add_arguments(rl)
    return p


def _options(args: argparse.Namespace) -> Options:
    content = None
    if getattr(args, "capture_content", False):
        content = ContentPolicy(max_length=args.max_attribute_length,
                                patterns=DEFAULT_REDACTIONS + tuple(args.redact))
    stall = int(getattr(args, "stall_timeout", 180.0) * 1e9)
    patterns = DEFAULT_PATTERNS
    if getattr(args, "orchestrator_patterns", None):
        patterns = patterns + load_patterns(args.orchestrator_patterns)
    return Options(
        orchestrator_logs=tuple(parse_log_arg(v) for v in getattr(args, "orchestrator_log", [])),
        orchestrator_patterns=patterns,
        roots=tuple(args.root or default_roots()),
        since_ns=args.since,
        timeouts=Timeouts(stall_ns=stall),
        content=content,
        conventions=Conventions.from_env(),
        pricing=Pricing(load_overrides(args.prices)) if getattr(args, "prices", None) else DEFAULT_PRICING,
    )


class _Progress:
    """A one-line progress bar on stderr while catching up (only on a terminal). Called between
    files: where a stop is honoured (the stopper is soft from the first call on)."""

    def __init__(self, stopper: Stopper | None = None) -> None:
        self.enabled = sys.stderr.isatty()
        self.last = 0.0
        self.stopper = stopper

    def __call__(self, done: int, total: int) -> None:
        if self.stopper is not None:
            self.stopper.hard = False
            self.stopper.check()
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.2 and done < total):
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\rcatching up [{bar:<30}] {frac:6.1%} {done / 1e6:,.1f}/{total / 1e6:,.1f} MB")
        sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _state(args: argparse.Namespace) -> State | None:
    if args.state_dir == "none":
        return None
    return State(args.state_dir or default_state_dir())


def _lock(args: argparse.Namespace) -> StateLock | None:
    """The state dir for this process alone (raises StateLocked / StateUnavailable)."""
    if args.state_dir == "none":
        log.warning("--state-dir none: no checkpoints; every start reads, sends and counts the whole history again")
        return None
    return lock_state_dir(args.state_dir or default_state_dir())


def _start(args: argparse.Namespace, metrics: Metrics | None = None,
           stopper: Stopper | None = None, keep_reading: bool = False) -> tuple[Pipeline, ExportQueue]:
    """``keep_reading``: a full trace queue does not stop reading and counting (``run``); the
    spans that did not fit are read again from the trace cursor once the backend caught up."""
    sink = make_sink(args.traces_exporter)
    state = _state(args)
    queue = ExportQueue(sink, notify=lambda msg: log.warning("%s", msg),
                        on_failure=(lambda: metrics.inc("ccotel_export_failures")) if metrics else None)
    if stopper is not None:
        stopper.wakers.append(lambda: drop_unsent(queue))
    pipeline = Pipeline(_options(args), emit=_emitter(queue, keep_reading), state=state, metrics=metrics)
    queue.on_ack = pipeline.acknowledge
    roots = ", ".join(pipeline.options.roots)
    log.info("ccotel %s reading %s; traces go to %s%s", __version__, roots, sink.describe(),
             "" if args.traces_exporter != "otlp" else " (kept in order and retried until a backend answers)")
    return pipeline, queue


def _emitter(queue: ExportQueue, keep_reading: bool) -> Callable[[list[SpanRecord]], bool]:
    if not keep_reading:
        return queue.submit  # blocks while the queue is full
    return lambda spans: queue.submit(spans, block_s=0.0)


def catch_up_traces(old: Pipeline, queue: ExportQueue, metrics: Metrics | None) -> Pipeline:
    """The trace queue overflowed while the backend was away, and it has now taken everything
    queued: read again from the trace cursor (the file checkpoints) with a fresh pipeline on the
    same state, as a restart would. Spans the backend has are skipped; counts not final yet are
    dropped and counted again from the lines, so nothing is lost or counted twice; history that
    was not counted stays uncounted."""
    old.process_acks()
    if metrics is not None:
        metrics.drop_pending()
    new = Pipeline(old.options, emit=_emitter(queue, True), clock=old.clock, state=old.state, metrics=metrics)
    new.not_live = set(old.not_live)
    queue.on_ack = new.acknowledge
    new.backfill()
    new.adopt_detector_state(*old.detector_state())
    log.info("trace backend caught up: read %d files again from the trace cursor, %d spans", new.stats.files,
             new.stats.spans)
    return new


def _catch_up_in_parallel(args: argparse.Namespace, progress: _Progress, close_all: bool = False,
                          metrics: bool = False, stopper: Stopper | None = None) -> CatchUpResult | None:
    """A large history is first read by several processes (catchup.py); the pipeline then reads
    only what they left open."""
    if args.state_dir == "none":
        return None  # without checkpoints the pipeline would read it all again
    from .catchup import catch_up_in_parallel  # multiprocessing and ctypes: only when needed

    workers = default_workers() if args.workers is None else args.workers
    done = catch_up_in_parallel(_options(args), args.state_dir or default_state_dir(), args.traces_exporter,
                                workers, progress, close_all=close_all, min_bytes=int(args.parallel_min_mb * 1e6),
                                metrics=metrics, stopper=stopper)
    if done is not None:
        log.info("%d processes read %d files, %d lines and exported %d spans in %.1f s (%s s; peak RSS %s MB)%s",
                 done.workers, done.files, done.lines, done.spans_exported, done.seconds,
                 " / ".join(f"{s:.1f}" for s in done.worker_seconds),
                 " / ".join(f"{m:.0f}" for m in done.worker_peak_rss_mb),
                 f"; {done.failed_workers} failed (their part is read again)" if done.failed_workers else "")
    return done


def _backfill(pipeline: Pipeline, queue: ExportQueue, progress: _Progress, stopper: Stopper,
              close_all: bool = False) -> int:
    """pipeline.backfill, stoppable between files. Interrupted: the export thread is stopped
    after the batch it sends (acknowledged ids are committed by on_ack) and no further offsets
    are checkpointed: the session being read was not handed to the exporter yet, so its lines
    must not be passed over; a restart reads it again and skips the spans already delivered."""
    stopper.hard = True  # until the first file is read, nothing is checkpointed by this thread
    try:
        kept = pipeline.backfill(progress, close_all=close_all)
    except Interrupted:
        abandon(queue, stopper.deadline(0.8))
        raise
    stopper.hard = False
    return kept


def _wait_for_backend(queue: ExportQueue, stopper: Stopper) -> None:
    """Until every span is delivered (the backend may be down: then this waits), or a stop."""
    if queue.pending():
        log.info("waiting for the trace backend to take %d spans", queue.pending())
    while not queue.flush(timeout_s=0.1):
        stopper.check()
    stopper.check()


def cmd_backfill(args: argparse.Namespace, stopper: Stopper | None = None) -> int:
    stopper = stopper or Stopper()
    lock = _lock(args)  # noqa: F841  (held until the process ends)
    progress = _Progress(stopper)
    parallel = _catch_up_in_parallel(args, progress, close_all=args.close_all, stopper=stopper)
    stopper.hard = True
    pipeline, queue = _start(args, stopper=stopper)
    kept = _backfill(pipeline, queue, progress, stopper, close_all=args.close_all)
    progress.end()
    pipeline.forget_gone()
    _wait_for_backend(queue, stopper)
    queue.close(timeout_s=None)
    pipeline.process_acks()
    written = settle_state(pipeline.state, time.monotonic() + 5.0)
    st = pipeline.stats
    lines, exported, errors = st.lines, queue.exported, Counter(st.errors)
    if parallel is not None:  # the files are the same; the lines and spans add up
        lines, exported = lines + parallel.lines, exported + parallel.spans_exported
        errors.update(parallel.errors)
    bad = ", ".join(f"{k}={v}" for k, v in sorted(errors.items())) or "none"
    log.info("backfill: %d files, %d lines, %d spans exported, bad input: %s%s", st.files, lines,
             exported, bad, f"; {kept} turns still open (ccotel run follows them)" if kept else "")
    return 0 if written else EXIT_ERROR


def _metrics_server(args: argparse.Namespace, metrics: Metrics) -> None:
    if args.metrics_addr == "none":
        return
    host, _, port = args.metrics_addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    serve(metrics, host, int(port))
    log.info("metrics on http://%s:%s/metrics", host, port)


def cmd_run(args: argparse.Namespace, stopper: Stopper | None = None) -> int:
    stopper = stopper or Stopper()
    lock = _lock(args)  # noqa: F841  (held until the process ends)
    from .genai_metrics import GenAIMetrics  # the OpenTelemetry metrics SDK: only for run

    genai = GenAIMetrics.from_env()  # None unless an OTLP metrics endpoint is configured
    metrics = Metrics(genai=genai)
    if genai is not None:
        log.info("GenAI metrics go to %s every %.0f s", genai.describe(), genai.settings.interval_ms / 1000)
    if args.state_dir != "none":  # served from the start, with the totals of the last run
        saved = State(args.state_dir or default_state_dir())
        metrics.restore(saved.counters())
        saved.close()
    _metrics_server(args, metrics)
    watcher = Watcher(_options(args).roots, force_polling=args.poll)
    watcher.start()  # before the catch-up, so nothing written meanwhile is missed
    progress = _Progress(stopper)
    parallel = _catch_up_in_parallel(args, progress, metrics=True, stopper=stopper)
    stopper.hard = True
    pipeline, queue = _start(args, metrics, stopper, keep_reading=True)
    state = pipeline.state
    if state is not None:
        state.on_error = lambda reason: metrics.inc("ccotel_checkpoint_errors", reason)
    current = [pipeline]  # replaced when the traces catch up
    metrics.gauges = lambda: {**current[0].gauges(), "ccotel_export_queue_spans": float(queue.pending()),
                              "ccotel_checkpoint_pending": float(state.pending if state is not None else 0)}
    _backfill(pipeline, queue, progress, stopper)
    if parallel is not None:
        pipeline.adopt_detector_state(parallel.ghosts, parallel.unseen_agents)
    progress.end()
    pipeline.forget_gone()
    log.info("caught up: %d files, %d spans; following live (%s)", pipeline.stats.files,
             pipeline.stats.spans, watcher.mode)
    status = sys.stderr.isatty() and not args.no_status
    last_rescan = last_status = last_retry = time.monotonic()
    while not stopper.is_set():
        dirty = watcher.wait(0.25)
        if dirty:
            pipeline.poll(sorted(dirty))
            pipeline.forget_deleted(dirty)
        pipeline.tick()
        if pipeline.traces_behind and queue.pending() == 0 and queue.down_since is None:
            pipeline = catch_up_traces(pipeline, queue, metrics)
            current[0] = pipeline
        now = time.monotonic()
        if state is not None and state.failures and now - last_retry > 1:
            last_retry = now
            state.retry()  # a full disk: the next commit may be a while away
        if now - last_rescan > 120:  # a safety net: inotify reports new files and directories
            last_rescan = now
            watcher.ensure_roots()
            pipeline.rescan()
        if status and now - last_status > 1:
            last_status = now
            st = pipeline.stats
            down = " backend DOWN, holding" if queue.down_since else ""
            sys.stderr.write(f"\rlive: {st.files} files, {st.lines} lines, {queue.exported} spans sent,"
                             f" {queue.pending()} pending{down}   ")
            sys.stderr.flush()
    # Stopped: what the backend takes within the first part of the grace period is checkpointed;
    # the rest is not sent (its lines are read again after a restart). A second signal ends it at once.
    log.info("%s: stopping", signal.Signals(stopper.signum).name)
    watcher.stop()
    if status:
        sys.stderr.write("\n")
    queue.flush(timeout_s=max(stopper.deadline(0.45) - time.monotonic(), 0.0))
    abandon(queue, stopper.deadline(0.7))
    pipeline.process_acks()
    written = settle_state(state, stopper.deadline(0.85))
    if genai is not None:
        genai.shutdown(timeout_s=max(stopper.deadline(0.95) - time.monotonic(), 0.05))
    return 0 if written else EXIT_ERROR


def cmd_report(args: argparse.Namespace) -> int:
    from .report import build_report

    report = build_report(_options(args), workers=args.workers, parallel_min_bytes=int(args.parallel_min_mb * 1e6))
    sessions = sorted(report.values(), key=lambda u: u.last_ns)
    if args.json:
        totals = {k: sum(int(cast(int, u.as_dict()[k])) for u in sessions)  # these keys hold ints
                  for k in ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens",
                            "totalTokens", "apiCalls")}
        doc = {"sessions": [u.as_dict() for u in sessions],
               "totals": {**totals, "totalCost": round(sum(u.cost_usd for u in sessions), 6)}}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    w = sys.stdout.write
    w(f"{'session':<38} {'input':>12} {'output':>12} {'cache write':>13} {'cache read':>14} {'cost $':>10}\n")
    for u in sessions:
        mark = "*" if u.unpriced_models else " "
        w(f"{u.session_id:<38} {u.input_tokens:>12,} {u.output_tokens:>12,} {u.cache_creation_tokens:>13,}"
          f" {u.cache_read_tokens:>14,} {u.cost_usd:>10.2f}{mark}\n")
    unpriced = sorted({m for u in sessions for m in u.unpriced_models})
    w(f"{'total':<38} {sum(u.input_tokens for u in sessions):>12,} {sum(u.output_tokens for u in sessions):>12,}"
      f" {sum(u.cache_creation_tokens for u in sessions):>13,} {sum(u.cache_read_tokens for u in sessions):>14,}"
      f" {sum(u.cost_usd for u in sessions):>10.2f}{'*' if unpriced else ' '}\n")
    if unpriced:
        w(f"* without the calls of models that have no price: {', '.join(unpriced)} (give them one with --prices)\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .check import CheckError, check_session, render

    roots = tuple(args.root or default_roots())
    try:
        health = check_session(args.session, roots, stall_s=args.stall_timeout)
    except CheckError as exc:
        sys.stderr.write(f"ccotel check: {exc}\n")
        return 2
    out = orjson.dumps(health.as_dict(), option=orjson.OPT_INDENT_2).decode() if args.json else render(health)
    sys.stdout.write(out + "\n")
    return 0 if health.resumable else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s ccotel %(levelname)s %(message)s", stream=sys.stderr)
    if args.command in ("backfill", "run"):
        stopper = Stopper().install()  # first: a stop is honoured from the start
        try:
            return cmd_backfill(args, stopper) if args.command == "backfill" else cmd_run(args, stopper)
        except Interrupted as stop:
            log.warning("%s before %s was done: stopped; checkpoints hold what the backend acknowledged, a "
                        "restart goes on from there", stop, "the catch-up" if args.command == "run" else "the backfill")
            die(stop.signum)
        except StateLocked as exc:
            log.error("%s", exc)
            return EXIT_LOCKED
        except StateError as exc:
            log.error("%s", exc)
            return EXIT_ERROR
    if args.command == "report":
        return cmd_report(args)
    if args.command == "check":
        return cmd_check(args)
    if args.command == "trace":
        from .waterfall import run as cmd_trace
        return cmd_trace(args)
    if args.command == "sessions":
        from .sessions import run as cmd_sessions
        return cmd_sessions(args)
    if args.command == "doctor":
        from .doctor import run as cmd_doctor
        return cmd_doctor(args)
    if args.command == "relay":
        from .relay import run as cmd_relay
        return cmd_relay(args)
    return 2
