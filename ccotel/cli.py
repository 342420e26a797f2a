"""Command line: the options of each command, and the commands. The loops that drive the
pipeline are in runner.py; the commands with options of their own (report, trace, sessions,
doctor, relay) take them from their modules."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from . import __version__
from .assemble import Timeouts
from .content import DEFAULT_REDACTIONS, ContentPolicy
from .discover import default_roots
from .metrics import Metrics, serve
from .orchestrator import DEFAULT_PATTERNS, load_patterns, parse_log_arg
from .pipeline import Options
from .pricing import DEFAULT_PRICING, Pricing, load_overrides
from .runner import (
    EXIT_ERROR,
    EXIT_LOCKED,
    STOP_GRACE_S,
    Interrupted,
    Stopper,
    describe,
    die,
    fill_ledger,
    follow,
    read_history,
    settle_state,
    wait_for_backend,
    wire,
)
from .shard import default_workers
from .spans import Conventions
from .state import StateError, StateLock, StateLocked, is_url, lock_state, open_state, resolve_state
from .watch import Watcher

if TYPE_CHECKING:
    from .catchup import CatchUpResult

__all__ = ["main", "build_parser", "parse_since", "Stopper", "Interrupted", "EXIT_ERROR", "EXIT_LOCKED",
           "STOP_GRACE_S"]

log = logging.getLogger("ccotel")


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
        sp.add_argument("--state", default=None, metavar="DIR|URL",
                        help="checkpoints, counter totals and the usage ledger: a dir (SQLite, one host; default "
                             "$CCOTEL_STATE or $XDG_STATE_HOME/ccotel), a postgresql:// URL (one state for a fleet; "
                             "password from PGPASSWORD or ~/.pgpass rather than the URL), or 'none' to keep nothing")
        sp.add_argument("--state-dir", default=None, help="the same as --state (a dir)")
        sp.add_argument("--host-id", default=None,
                        help="this host's name in a shared (PostgreSQL) state (default $CCOTEL_HOST_ID, the host name)")

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
    from . import registry
    registry.add_arguments(run)

    bf = sub.add_parser("backfill", help="export history once, then exit")
    common(bf)
    tracing(bf)
    durable(bf)
    bf.add_argument("--close-all", action="store_true",
                    help="close every open turn, even ones whose session may still be running")

    from . import check

    chk = sub.add_parser("check", help="health of one session: exit 1 if it should not be resumed")
    chk.add_argument("--root", action="append", default=None)
    chk.add_argument("-v", "--verbose", action="store_true")
    check.add_arguments(chk)

    from . import doctor, relay, report, sessions, waterfall  # commands whose options live with them

    rep = sub.add_parser("report", help="usage, cost, tool calls and health by day, week, month, session or project")
    rep.add_argument("--root", action="append", default=None,
                     help="Claude config dir to read (repeatable; default $CLAUDE_CONFIG_DIR or ~/.claude)")
    durable(rep)
    report.add_arguments(rep)

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
        registries=tuple(os.path.abspath(d) for d in getattr(args, "registry", [])),
        registry_kill_grace_ns=int(getattr(args, "registry_kill_grace", 5.0) * 1e9),
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


def _lock(args: argparse.Namespace) -> StateLock | None:
    """The state for this process alone: the dir, or this host id in PostgreSQL (raises
    StateLocked / StateUnavailable)."""
    location = _state_dir(args)
    if location is None:
        log.warning("--state none: no checkpoints; every start reads, sends and counts the whole history again")
        return None
    return lock_state(location, args.host_id)


def _catch_up_in_parallel(args: argparse.Namespace, progress: _Progress, close_all: bool = False,
                          metrics: bool = False, stopper: Stopper | None = None) -> CatchUpResult | None:
    """A large history is first read by several processes (catchup.py); the pipeline then reads
    only what they left open."""
    location = _state_dir(args)
    if location is None or is_url(location):
        return None  # without checkpoints the pipeline would read it all again; PostgreSQL: one reader per host
    from .catchup import catch_up_in_parallel  # multiprocessing and ctypes: only when needed

    workers = default_workers() if args.workers is None else args.workers
    done = catch_up_in_parallel(_options(args), location, args.traces_exporter,
                                workers, progress, close_all=close_all, min_bytes=int(args.parallel_min_mb * 1e6),
                                metrics=metrics, stopper=stopper)
    if done is not None:
        log.info("%d processes read %d files, %d lines and exported %d spans in %.1f s (%s s; peak RSS %s MB)%s",
                 done.workers, done.files, done.lines, done.spans_exported, done.seconds,
                 " / ".join(f"{s:.1f}" for s in done.worker_seconds),
                 " / ".join(f"{m:.0f}" for m in done.worker_peak_rss_mb),
                 f"; {done.failed_workers} failed (their part is read again)" if done.failed_workers else "")
    return done


def _state_dir(args: argparse.Namespace) -> str | None:
    """--state, --state-dir, $CCOTEL_STATE or the default dir; None for 'none'."""
    return resolve_state(getattr(args, "state", None), args.state_dir)


def cmd_backfill(args: argparse.Namespace, stopper: Stopper | None = None) -> int:
    stopper = stopper or Stopper()
    lock = _lock(args)  # noqa: F841  (held until the process ends)
    fill_ledger(_options(args), _state_dir(args), stopper)
    progress = _Progress(stopper)
    parallel = _catch_up_in_parallel(args, progress, close_all=args.close_all, stopper=stopper)
    stopper.hard = True
    wired = wire(_options(args), args.traces_exporter, _state_dir(args), stopper=stopper, host=args.host_id)
    describe(wired, args.traces_exporter)
    pipeline, queue = wired.pipeline, wired.queue
    kept = read_history(wired, progress, stopper, close_all=args.close_all)
    progress.end()
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
    state_dir = _state_dir(args)
    if state_dir is not None:  # served from the start, with the totals of the last run
        saved = open_state(state_dir, args.host_id)
        metrics.restore(saved.counters())
        saved.close()
    _metrics_server(args, metrics)
    watcher = Watcher(_options(args).roots, force_polling=args.poll)
    watcher.start()  # before the catch-up, so nothing written meanwhile is missed
    fill_ledger(_options(args), state_dir, stopper)
    progress = _Progress(stopper)
    parallel = _catch_up_in_parallel(args, progress, metrics=True, stopper=stopper)
    stopper.hard = True
    wired = wire(_options(args), args.traces_exporter, state_dir, metrics, stopper, keep_reading=True,
                 host=args.host_id)
    describe(wired, args.traces_exporter)
    pipeline = wired.pipeline
    read_history(wired, progress, stopper)
    if parallel is not None:
        pipeline.adopt_detector_state(parallel.ghosts, parallel.unseen_agents)
    progress.end()
    pipeline.forget_gone()
    log.info("caught up: %d files, %d spans; following live (%s)", pipeline.stats.files,
             pipeline.stats.spans, watcher.mode)
    status = follow(wired, watcher, stopper, metrics, sys.stderr.isatty() and not args.no_status)
    wired.close()
    if genai is not None:
        genai.shutdown(timeout_s=max(stopper.deadline(0.95) - time.monotonic(), 0.05))
    return status


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
        from .report import run as cmd_report
        return cmd_report(args)
    if args.command == "check":
        from .check import run as cmd_check
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
