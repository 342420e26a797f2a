"""``ccotel relay``: pass Claude Code's stream-json through, byte for byte, and export it live.

    claude -p "..." --output-format stream-json --verbose | ccotel relay | your-program
    ccotel relay -- claude -p "..." --output-format stream-json --verbose | your-program

What comes in goes out unchanged and at once (whatever the read returned, partial lines
included: nothing waits for a newline); a second thread parses whole lines and builds spans
(sources/stream/) with the ids the transcript path gives, so a backend that also gets the sidecar's
copy keeps one. The one thing the stream lacks for those ids, the uuid of a turn's prompt, is
read from the session's transcript under the roots (``--root``, default $CLAUDE_CONFIG_DIR or
~/.claude), retried briefly while Claude Code flushes it; without a transcript
(``--no-session-persistence``, another machine) the turn gets ids of its own.

Wrapping a command: its stdout is relayed, its exit status is ccotel's (128+N when a signal N
ended it), SIGINT and SIGTERM are passed on to its process group (it runs in a group of its own, so
a terminal's Ctrl-C reaches it once, through ccotel); one that is still running ``KILL_GRACE_S``
later is killed.

Bounds: lines wait for the parsing thread up to ``MAX_QUEUED_BYTES`` (then reading waits: the
producer is held up, nothing is lost); spans wait for the trace backend up to the export queue's
bound (then they are dropped and counted: the stream never waits for the backend). When stdout
closes, or at SIGINT/SIGTERM, the relay stops reading, ends the command and leaves lines not parsed
yet: it is gone within ``KILL_GRACE_S`` and ``STOP_FLUSH_S``.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from ccotel import logs
from ccotel.commands.options import add_label_cap, finite
from ccotel.export.sinks import ConsoleSink, ExportQueue, make_sink
from ccotel.metrics import events
from ccotel.metrics.address import metrics_address
from ccotel.metrics.counters import Metrics
from ccotel.read.layout import default_roots
from ccotel.records import SpanRecord
from ccotel.run.stopping import STOP_SIGNALS
from ccotel.sources.stream.assembler import StreamAssembler
from ccotel.sources.stream.lines import MAX_LINE_BYTES, Counter, parse_record
from ccotel.sources.stream.prompts import TranscriptPrompts

__all__ = [
    "KILL_GRACE_S",
    "MAX_QUEUED_BYTES",
    "RelayResult",
    "TranscriptPrompts",
    "add_arguments",
    "counter_for",
    "main",
    "relay",
    "run",
]

log = logging.getLogger("ccotel.relay")

_READ_SIZE = 1 << 16
# After the wrapped command exited, how long its stdout may stay open (a grandchild holding it).
_CHILD_EOF_GRACE_S = 2.0
# After SIGTERM (passed on, or sent when stdout closed), how long the command has before SIGKILL.
KILL_GRACE_S = 2.0
# After a stop, how long the spans already built have to reach the trace backend.
STOP_FLUSH_S = 1.0
# Lines read and not parsed yet, in bytes (one longer line is always taken): past this reading
# waits for the parsing thread, so a producer faster than it cannot fill the memory.
MAX_QUEUED_BYTES = 16 << 20
_LINE_OVERHEAD = 128  # what a queued line costs besides its bytes (a flood of short lines)


# -- the relay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RelayResult:
    lines: int
    bad_lines: dict[str, int]
    spans: int
    exit_status: int
    passthrough_error: str | None = None  # stdout went away (EPIPE): the relay stopped there
    stopped: bool = False  # SIGINT/SIGTERM (``stop``) ended it
    abandoned: int = 0  # lines read and never parsed (a stop, stdout closed)


@dataclass(frozen=True)
class _Line:
    data: bytes
    arrival_ns: int
    terminated: bool


class _Splitter:
    """Whole lines out of the chunks read; an over-long line is skipped (it was passed through)."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes, now_ns: int) -> tuple[list[_Line], int]:
        """(complete lines, how many over-long lines ended in this chunk)."""
        out: list[_Line] = []
        too_long = 0
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            piece = chunk[start:nl]
            if self._skipping:
                self._skipping = False
                too_long += 1
            elif len(self._buf) + len(piece) > self.max_line_bytes:
                self._buf.clear()
                too_long += 1
            else:
                self._buf += piece
                out.append(_Line(bytes(self._buf), now_ns, True))
                self._buf.clear()
            start = nl + 1
        rest = chunk[start:]
        if not self._skipping:
            if len(self._buf) + len(rest) > self.max_line_bytes:
                self._buf.clear()
                self._skipping = True
            else:
                self._buf += rest
        return out, too_long

    def end(self, now_ns: int) -> tuple[_Line | None, int]:
        if self._skipping:
            return None, 1
        if not self._buf:
            return None, 0
        line = _Line(bytes(self._buf), now_ns, False)
        self._buf.clear()
        return line, 0


_IDLE = _Line(b"", 0, True)  # no line came for a while: time to tick


def _cost(line: _Line | None) -> int:
    return 0 if line is None else len(line.data) + _LINE_OVERHEAD


class _Lines:
    """The lines between the reading thread and the parsing one: at most ``max_bytes`` of them
    (one line of any length is always taken), so memory does not follow a producer faster than
    parsing. ``None`` ends the parsing thread."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._q: deque[_Line | None] = deque()
        self._bytes = 0
        self._cv = threading.Condition()
        self.abandoned = 0  # lines read and never parsed

    def put(self, line: _Line | None, give_up: Callable[[], bool]) -> None:
        """Queue ``line``, waiting while the queue is full; a line that would wait after
        ``give_up()`` turned true is left (a stop: waiting would hold the stop up)."""
        cost = _cost(line)
        with self._cv:
            while line is not None and self._q and self._bytes + cost > self.max_bytes:
                if give_up():
                    self.abandoned += 1
                    return
                self._cv.wait(0.05)
            self._q.append(line)
            self._bytes += cost
            self._cv.notify_all()

    def get(self, timeout_s: float) -> _Line | None:
        """The next line, ``None`` at the end, ``_IDLE`` if none came within ``timeout_s``."""
        with self._cv:
            if not self._q:
                self._cv.wait(timeout_s)
                if not self._q:
                    return _IDLE
            line = self._q.popleft()
            self._bytes -= _cost(line)
            self._cv.notify_all()
            return line

    def abandon(self) -> None:
        """Leave every line not parsed yet, and end the parsing thread after the one it is on."""
        with self._cv:
            self.abandoned += sum(1 for line in self._q if line is not None)
            self._q.clear()
            self._q.append(None)
            self._bytes = 0
            self._cv.notify_all()


class _Processor:
    """The thread that parses lines, assembles spans and hands them to the export queue."""

    def __init__(self, assembler: StreamAssembler, submit: Callable[[list[SpanRecord]], object],
                 count: Counter, clock: Callable[[], int], max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.assembler = assembler
        self.submit = submit
        self.count = count
        self.clock = clock
        self.lines = 0
        self.bad: dict[str, int] = {}
        self.spans = 0
        self.queue = _Lines(max_queued_bytes)
        self._thread = threading.Thread(target=self._loop, name="ccotel-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, line: _Line | None, give_up: Callable[[], bool] = lambda: False) -> None:
        self.queue.put(line, give_up)

    def bad_line(self, reason: str, n: int = 1) -> None:
        self.bad[reason] = self.bad.get(reason, 0) + n
        self.count("ccotel_relay_bad_lines", (reason,), float(n))

    def join(self, timeout_s: float | None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while True:
            line = self.queue.get(0.5)
            if line is None:
                break
            try:
                if line is not _IDLE:
                    self.handle(line)
                self.assembler.tick(self.clock())  # a finished turn's span, once nothing adds to it
                self._flush()
            except Exception:  # noqa: BLE001  (a bug must not stop the passthrough; it is logged)
                log.exception("could not process a stream line; it was passed through")
        try:
            self.assembler.finish(self.clock())
        except Exception:  # noqa: BLE001
            log.exception("could not finish the stream's spans")
        self._flush()

    def handle(self, line: _Line) -> None:
        self.lines += 1
        self.count("ccotel_relay_lines", (), 1.0)
        rec, reason = parse_record(line.data)
        if reason is not None:
            self.bad_line("truncated" if not line.terminated else reason)
            return
        if rec is not None:
            self.assembler.add(rec, line.arrival_ns)

    def _flush(self) -> None:
        spans = self.assembler.drain()
        if spans:
            self.spans += len(spans)
            self.submit(spans)


def relay(src: int, dst: int | None, assembler: StreamAssembler, submit: Callable[[list[SpanRecord]], object],
          count: Counter, *, child: subprocess.Popen[bytes] | None = None,
          stop: threading.Event | None = None, clock: Callable[[], int] = time.time_ns,
          max_line_bytes: int = MAX_LINE_BYTES, finish_timeout_s: float | None = 30.0,
          max_queued_bytes: int = MAX_QUEUED_BYTES, kill_grace_s: float = KILL_GRACE_S) -> RelayResult:
    """Copy ``src`` to ``dst`` as it comes and feed its lines to ``assembler`` on another thread.
    Returns at EOF (or once ``child`` exited and its stdout stayed open past a grace period), when
    the last line's spans were submitted. At ``stop`` (SIGINT/SIGTERM, already passed on to
    ``child``) or once ``dst`` is closed, it stops: lines not parsed yet are left, and ``child``,
    still running ``kill_grace_s`` later, is killed with its process group."""
    stop = stop if stop is not None else threading.Event()
    proc = _Processor(assembler, submit, count, clock, max_queued_bytes)
    proc.start()
    splitter = _Splitter(max_line_bytes)
    out_error: str | None = None
    exited_at: float | None = None
    stopped_at: float | None = None
    while True:
        if stop.is_set():
            if child is None:
                break
            # the command was told (_forward_signals): its last words are still relayed, for a while
            stopped_at = stopped_at or time.monotonic()
            if time.monotonic() - stopped_at > kill_grace_s:
                log.warning("the command is still running %.0f s after the signal: killed", kill_grace_s)
                _signal_group(child, signal.SIGKILL)
                break
        ready, _, _ = select.select([src], [], [], 0.25)
        if not ready:
            if child is not None and child.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > _CHILD_EOF_GRACE_S:
                    log.warning("the command exited but its stdout is still open (a process it started holds "
                                "it): relay stopped")
                    break
            continue
        try:
            chunk = os.read(src, _READ_SIZE)
        except InterruptedError:
            continue
        if not chunk:
            break
        if dst is not None:
            try:
                _write_all(dst, chunk)
            except OSError as exc:  # EPIPE: the reader went away; reading on would only fill the memory
                out_error = exc.strerror or str(exc)
                log.warning("stdout closed (%s): relay stopped", out_error)
                break
        now = clock()
        lines, too_long = splitter.feed(chunk, now)
        if too_long:
            proc.bad_line("line_too_long", too_long)
        for line in lines:
            proc.put(line, stop.is_set)
    if out_error is not None:
        proc.queue.abandon()  # nobody reads the stream any more: what it still says is left
        if child is not None:
            _end(child, kill_grace_s)
    elif stop.is_set():
        if child is not None:
            _end(child, kill_grace_s)
    else:
        last, too_long = splitter.end(clock())
        if too_long:
            proc.bad_line("line_too_long", too_long)
        if last is not None:
            proc.put(last, stop.is_set)
    proc.put(None)
    _finish(proc, stop, finish_timeout_s)
    status = _exit_status(child, stop, kill_grace_s)
    if proc.queue.abandoned:
        log.warning("%d stream lines not parsed (relay stopped): their spans are missing", proc.queue.abandoned)
    return RelayResult(proc.lines, dict(proc.bad), proc.spans, status, out_error, stop.is_set(),
                       proc.queue.abandoned)


def _finish(proc: _Processor, stop: threading.Event, timeout_s: float | None) -> None:
    """Wait for the parsing thread to build the last spans, at most ``timeout_s``. Once stopped
    (before or meanwhile) it has ``STOP_FLUSH_S`` to go through the lines queued (the command's
    last words among them); those it has not parsed by then are left, and it has ``STOP_FLUSH_S``
    more to build the spans of what it parsed."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    stop_deadline: float | None = None
    abandoned = False
    while not proc.join(0.05):
        now = time.monotonic()
        if stop.is_set() and stop_deadline is None:
            stop_deadline = now + STOP_FLUSH_S
        if stop_deadline is not None and now > stop_deadline:
            if abandoned:
                log.warning("the stream's last spans were not built within %.0f s of the stop", 2 * STOP_FLUSH_S)
                return
            proc.queue.abandon()
            abandoned, stop_deadline = True, now + STOP_FLUSH_S
        if deadline is not None and now > deadline:
            log.warning("the stream's spans were not all built within %.0f s", timeout_s or 0)
            return


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to the command's process group (what it started too: ``sh -c`` runs its pipeline there)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _end(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """End the command: its stdout is not read any more (a write gets EPIPE), SIGTERM to its group,
    SIGKILL ``grace_s`` later if it is still running."""
    if child.stdout is not None:
        child.stdout.close()
    if child.poll() is None:
        _signal_group(child, signal.SIGTERM)
    try:
        child.wait(grace_s)
    except subprocess.TimeoutExpired:
        log.warning("the command is still running %.0f s after SIGTERM: killed", grace_s)
        _signal_group(child, signal.SIGKILL)
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _exit_status(child: subprocess.Popen[bytes] | None, stop: threading.Event, grace_s: float) -> int:
    """The command's exit status once it ended (it closed its stdout first); a signal meanwhile
    ends it as any stop does."""
    if child is None:
        return 0
    while child.poll() is None:
        if stop.is_set():
            _end(child, grace_s)
            break
        time.sleep(0.05)
    code = child.poll()
    if code is None:
        return 128 + signal.SIGKILL  # killed and not reaped within the grace (stuck in the kernel)
    return 128 - code if code < 0 else code  # killed by signal N: 128+N, as a shell says


# -- the command -------------------------------------------------------------------------------


def counter_for(metrics: Metrics) -> Counter:
    """``count`` for sources/stream/ on ``metrics`` (the relay's counters are declared in ccotel.metrics)."""

    def count(name: str, labels: tuple[str, ...], value: float) -> None:
        metrics.inc(name, *labels, value=value)

    return count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel relay`` options (besides the common --root): where spans go, and the command."""
    parser.add_argument("--traces-exporter", choices=("otlp", "console", "none"), default="otlp",
                        help="where spans go; otlp uses the standard OTEL_EXPORTER_OTLP_* variables")
    parser.add_argument("--metrics-addr", default="none", type=metrics_address, metavar="HOST:PORT",
                        help="host:port to serve Prometheus /metrics while relaying ('none': off, the default)")
    add_label_cap(parser)
    parser.add_argument("--flush-timeout", type=finite(0, 86400, "seconds"), default=5.0,
                        help="seconds to wait at the end for the trace backend to take the spans")
    # not "command": cli.py's subparsers keep the subcommand's name there
    parser.add_argument("relay_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="run COMMAND and relay its stdout (default: relay stdin)")


def run(args: argparse.Namespace, metrics: Metrics | None = None) -> int:
    """Relay stdin, or run ``args.relay_command`` and relay its stdout; returns the exit status
    (the command's, when there is one)."""
    command = list(args.relay_command or [])
    if command and command[0] == "--":
        command = command[1:]
    metrics = metrics if metrics is not None else Metrics(max_label_values=args.max_label_values)
    address = getattr(args, "metrics_addr", None)
    if address is not None:
        from ccotel.metrics.server import serve

        serve(metrics, address)
    roots = tuple(getattr(args, "root", None) or default_roots())
    # stdout carries the stream: the console exporter writes its spans to stderr instead
    sink = ConsoleSink(sys.stderr) if args.traces_exporter == "console" else make_sink(args.traces_exporter)
    export = ExportQueue(sink, notify=lambda msg: log.warning("%s", msg),
                         on_failure=lambda: events.export_failed(metrics))

    full = [0]  # spans the full export queue could not take

    def submit(spans: list[SpanRecord]) -> None:
        # never waits: the stream must not wait for the trace backend; what the full queue cannot
        # take is dropped and counted
        if not export.submit(spans, block_s=0.0):
            if not full[0]:
                log.warning("the export queue is full (the trace backend is slow or away): spans dropped, "
                            "counted in ccotel_spans_dropped_total{reason=\"queue_full\"}")
            full[0] += len(spans)
            events.spans_dropped(metrics, "queue_full", len(spans))

    count = counter_for(metrics)

    assembler = StreamAssembler(TranscriptPrompts(roots), count)
    stop = _Stop()
    child: subprocess.Popen[bytes] | None = None
    if command:
        try:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            log.error("cannot run %s: %s", command[0], exc)
            export.close(timeout_s=0)
            return 127 if isinstance(exc, FileNotFoundError) else 126
        assert child.stdout is not None
        src = child.stdout.fileno()
    else:
        src = sys.stdin.buffer.fileno()
    previous = _forward_signals(child, stop)
    try:
        result = relay(src, sys.stdout.buffer.fileno(), assembler, submit, count, child=child, stop=stop)
    finally:
        _restore_signals(previous)
    # stopped: the spans already built get a short while (a signal now ends ccotel at once)
    flush_s = min(args.flush_timeout, STOP_FLUSH_S) if result.stopped or result.passthrough_error else \
        args.flush_timeout
    if not export.flush(timeout_s=flush_s):
        log.warning("%d spans not taken by the trace backend within %.1f s: dropped", export.pending(), flush_s)
    export.close(timeout_s=0)
    bad = ", ".join(f"{k}={v}" for k, v in sorted(result.bad_lines.items())) or "none"
    log.debug("relay: %d lines, %d spans, bad lines: %s", result.lines, result.spans, bad)
    if child is None and stop.is_set():
        return 128 + stop.signum
    return result.exit_status


_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class _Stop(threading.Event):
    """Set by SIGINT/SIGTERM while relaying stdin; ``signum`` says which."""

    signum: int = 0


def _forward_signals(child: subprocess.Popen[bytes] | None, stop: _Stop) -> dict[int, _Handler]:
    """SIGINT/SIGTERM: passed on to the command's process group, and the relay stops (relay():
    with a command, once it ended or after a grace)."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        if child is not None:
            _signal_group(child, signum)  # the command may still say its last words: relay() allows a grace
        stop.signum = signum
        stop.set()

    previous: dict[int, _Handler] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous  # signal handlers belong to the main thread (tests call run from others)
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, handle)
    return previous


def _restore_signals(previous: dict[int, _Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """``python -m ccotel.relay [--root DIR] [options] [-- COMMAND ...]`` (until cli.py has it)."""
    parser = argparse.ArgumentParser(prog="ccotel relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", action="append", default=None)
    parser.add_argument("-v", "--verbose", action="store_true")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure(args.verbose)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
