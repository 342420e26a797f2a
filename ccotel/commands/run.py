"""The sidecar's commands, ``ccotel run`` and ``ccotel backfill``: their options become an
``Options``, the state is locked, a large history is read by worker processes, then the runner
(runner.py) reads what is left and follows the files live. Imported by cli.py only for these two
commands: the others (check, report, trace, ...) start without the pipeline.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

from ccotel.assemble.closing import Timeouts
from ccotel.metrics.counters import DEFAULT_MAX_LABEL_VALUES, Metrics
from ccotel.read.layout import default_roots
from ccotel.read.shard import default_workers, end_resource_tracker, worth_processes
from ccotel.run.livefirst import LiveFirst
from ccotel.run.pipeline import Options
from ccotel.run.runner import Interrupted, describe, fill_ledger, follow, read_history, wait_for_backend, wire
from ccotel.run.status import StatusLine
from ccotel.run.stopping import EXIT_ERROR, Stopper, settle_state
from ccotel.sources.hooks.spool import spool_dir
from ccotel.sources.orchestrator import DEFAULT_PATTERNS, parse_log_arg
from ccotel.spans.build import Conventions
from ccotel.spans.content import DEFAULT_REDACTIONS, ContentPolicy
from ccotel.spans.pricing import DEFAULT_PRICING, Pricing
from ccotel.store.backends import lock_state, open_state
from ccotel.store.location import local_state_dir
from ccotel.store.state import StateLock, resolve_state

if TYPE_CHECKING:
    from ccotel.run.catchup import CatchUpResult

__all__ = ["cmd_run", "cmd_backfill", "options_of"]

log = logging.getLogger("ccotel")


def options_of(args: argparse.Namespace) -> Options:
    """The pipeline's options from the command line's."""
    content = None
    if getattr(args, "capture_content", False):
        content = ContentPolicy(max_length=args.max_attribute_length,
                                patterns=DEFAULT_REDACTIONS + tuple(args.redact))
    stall = int(args.stall_timeout * 1e9)
    patterns = DEFAULT_PATTERNS + (getattr(args, "orchestrator_patterns", None) or ())  # read while parsing
    return Options(
        orchestrator_logs=tuple(parse_log_arg(v) for v in getattr(args, "orchestrator_log", [])),
        orchestrator_patterns=patterns,
        roots=tuple(args.root or default_roots()),
        since_ns=args.since,
        timeouts=Timeouts(stall_ns=stall),
        content=content,
        conventions=Conventions.from_env(),
        pricing=Pricing(args.prices) if getattr(args, "prices", None) else DEFAULT_PRICING,
        registries=tuple(os.path.abspath(d) for d in getattr(args, "registry", [])),
        registry_kill_grace_ns=int(getattr(args, "registry_kill_grace", 5.0) * 1e9),
        hooks_spool=_hooks_spool(args),
        max_label_values=getattr(args, "max_label_values", DEFAULT_MAX_LABEL_VALUES),
    )


def _hooks_spool(args: argparse.Namespace) -> str | None:
    """The spool ``ccotel hook`` writes beside the state (sources/hooks/); none without a state."""
    location = resolve_state(getattr(args, "state", None), getattr(args, "state_dir", None))
    if location is None or _preview(args):
        return None
    return spool_dir(local_state_dir(location))


class _Progress:
    """A one-line progress bar on the terminal's status line while catching up (None: not on a
    terminal). Called between files: where a stop is honoured (the stopper is soft from the first
    call on)."""

    def __init__(self, stopper: Stopper | None = None, line: StatusLine | None = None) -> None:
        self.line = line
        self.last = 0.0
        self.stopper = stopper

    def __call__(self, done: int, total: int) -> None:
        if self.stopper is not None:
            self.stopper.hard = False
            self.stopper.check()
        now = time.monotonic()
        if self.line is None or (now - self.last < 0.2 and done < total):
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.line.show(f"catching up [{bar:<30}] {frac:6.1%} {done / 1e6:,.1f}/{total / 1e6:,.1f} MB")

    def end(self) -> None:
        if self.line is not None:
            self.line.done()


def _status_line() -> StatusLine | None:
    """The terminal's status line, log records above it; None when stderr is not a terminal."""
    return StatusLine(sys.stderr).attach() if sys.stderr.isatty() else None


def _lock(args: argparse.Namespace) -> StateLock | None:
    """The state for this process alone: the dir, or this host id in PostgreSQL (raises
    StateLocked / StateUnavailable)."""
    if _preview(args):
        log.info("a console preview marks nothing as sent: no checkpoint, ledger row or counter total is written "
                 "(the state is not opened), so a later backfill or run to a trace backend sends this history")
        return None
    location = _state_dir(args)
    if location is None:
        log.warning("--state none: no checkpoints; every start reads, sends and counts the whole history again")
        return None
    return lock_state(location, args.host_id, getattr(args, "claim_lease", None))


def _catch_up_in_parallel(args: argparse.Namespace, progress: _Progress, close_all: bool = False,
                          metrics: bool = False, stopper: Stopper | None = None,
                          live: LiveFirst | None = None) -> CatchUpResult | None:
    """A large history is first read by several processes (catchup.py); the pipeline then reads
    only what they left open."""
    location = _state_dir(args)
    if location is None:
        return None  # without checkpoints the pipeline would read it all again
    workers = default_workers() if args.workers is None else args.workers  # run's parser gives SIDECAR_WORKERS
    if not worth_processes(workers, live=live is not None, exporter=args.traces_exporter):
        return None
    from ccotel.run.catchup import catch_up_in_parallel  # multiprocessing and ctypes: only when needed

    done = catch_up_in_parallel(options_of(args), location, args.traces_exporter,
                                workers, min_bytes=int(args.parallel_min_mb * 1e6), progress=progress,
                                close_all=close_all, metrics=metrics, stopper=stopper, live=live, host=args.host_id)
    end_resource_tracker()  # the workers and their counter are gone (and freed) once it returns
    if done is not None:
        log.info("%d process%s%s read %d files, %d lines and exported %d spans in %.1f s (%s s; peak RSS %s MB)%s",
                 done.workers, "es" if done.workers != 1 else "",
                 f" at a time ({done.jobs} in all)" if done.jobs > done.workers else "",
                 done.files, done.lines, done.spans_exported, done.seconds,
                 " / ".join(f"{s:.1f}" for s in done.worker_seconds),
                 " / ".join(f"{m:.0f}" for m in done.worker_peak_rss_mb),
                 f"; {done.failed_workers} failed (their part is read again)" if done.failed_workers else "")
    return done


def _preview(args: argparse.Namespace) -> bool:
    """--traces-exporter console: spans to look at, not delivered anywhere. Moving checkpoints (or
    recording the ledger) for them would mark the history as sent, and a later export to a trace
    backend would send none of it. (`none` does move them: it is the metrics-and-ledger mode,
    docs/run.md.)"""
    return bool(args.traces_exporter == "console")


def _state_dir(args: argparse.Namespace) -> str | None:
    """--state, --state-dir, $CCOTEL_STATE or the default dir; None for 'none', and for a console
    preview, which reads the whole history and leaves the state as it is."""
    if _preview(args):
        return None
    return resolve_state(getattr(args, "state", None), args.state_dir)


def cmd_backfill(args: argparse.Namespace, stopper: Stopper | None = None) -> int:
    stopper = stopper or Stopper()
    lock = _lock(args)  # noqa: F841  (held until the process ends)
    fill_ledger(options_of(args), _state_dir(args), stopper)
    line = _status_line()
    progress = _Progress(stopper, line)
    parallel = _catch_up_in_parallel(args, progress, close_all=args.close_all, stopper=stopper)
    stopper.hard = True
    wired = wire(options_of(args), args.traces_exporter, _state_dir(args), stopper=stopper, host=args.host_id)
    describe(wired, args.traces_exporter)
    pipeline, queue = wired.pipeline, wired.queue
    kept = read_history(wired, progress, stopper, close_all=args.close_all)
    progress.end()
    if line is not None:
        line.detach()
    pipeline.forget_gone()
    wait_for_backend(queue, stopper)
    queue.close(timeout_s=None)
    pipeline.process_acks()
    written = settle_state(wired.state, time.monotonic() + 5.0)
    wired.close()
    st = pipeline.stats
    lines, exported, errors = st.lines, queue.exported, Counter(st.errors)
    if parallel is not None:  # the files are the same; the lines and spans add up
        lines, exported = lines + parallel.lines, exported + parallel.spans_exported
        errors.update(parallel.errors)
    bad = ", ".join(f"{k}={v}" for k, v in sorted(errors.items())) or "none"
    log.info("backfill: %d files, %d lines, %d spans exported, bad input: %s%s", st.files, lines,
             exported, bad, f"; {kept} turns still open (ccotel run follows them)" if kept else "")
    return 0 if written else EXIT_ERROR


def cmd_run(args: argparse.Namespace, stopper: Stopper | None = None) -> int:
    stopper = stopper or Stopper()
    lock = _lock(args)  # held until the process ends, and checked while following
    from ccotel.metrics.genai import GenAIMetrics  # the OpenTelemetry metrics SDK: only for run

    genai = GenAIMetrics.from_env()  # None unless an OTLP metrics endpoint is configured
    metrics = Metrics(genai=genai, max_label_values=args.max_label_values)
    if genai is not None:
        log.info("GenAI metrics go to %s every %.0f s", genai.describe(), genai.settings.interval_ms / 1000)
    state_dir = _state_dir(args)
    if state_dir is not None:  # served from the start, with the totals of the last run
        saved = open_state(state_dir, args.host_id)
        metrics.restore(saved.counters())
        saved.close()
    if args.metrics_addr is not None:
        from ccotel.metrics.server import serve  # http.server and prometheus_client: only where metrics are served

        serve(metrics, args.metrics_addr)
    from ccotel.read.watch import Watcher  # watchdog: only for following live, not for a backfill

    watcher = Watcher(options_of(args).roots, force_polling=args.poll)
    watcher.start()  # before the catch-up, so nothing written meanwhile is missed
    fill_ledger(options_of(args), state_dir, stopper)
    line = _status_line()
    progress = _Progress(stopper, line)
    stopper.hard = True
    wired = wire(options_of(args), args.traces_exporter, state_dir, metrics, stopper, keep_reading=True,
                 host=args.host_id)
    describe(wired, args.traces_exporter)
    pipeline = wired.pipeline
    live = LiveFirst(pipeline, watcher)  # the live sessions first, followed while the history is read
    try:
        parallel = _catch_up_in_parallel(args, progress, metrics=True, stopper=stopper, live=live)
    except Interrupted:
        wired.queue.abandon(stopper.deadline(0.8))  # live spans in flight: as runner.read_history does
        raise
    read_history(wired, progress, stopper, live=live)
    if parallel is not None:
        pipeline.adopt_detector_state(parallel.ghosts, parallel.unseen_agents)
    progress.end()
    pipeline.forget_gone()
    log.info("caught up: %d files, %d spans; following live (%s)", pipeline.stats.files,
             pipeline.stats.spans, watcher.mode)
    status = follow(wired, watcher, stopper, metrics, None if args.no_status else line, lock)
    if line is not None:
        line.detach()
    wired.close(wait_s=max(stopper.deadline(0.9) - time.monotonic(), 0.0))  # gone within the grace period
    if genai is not None:
        genai.shutdown(timeout_s=max(stopper.deadline(0.95) - time.monotonic(), 0.05))
    return status
