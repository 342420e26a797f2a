"""What ccotel counts, one named function per event (as Vector's internal events): a call site says what
happened (``events.ledger_write_failed(metrics)``), this module says which series counts it.

A metric name written at a call site fails only when that line runs; a misspelt function here fails
mypy. The names are those of ``METRICS`` (metrics/counters.py), and tests/metrics/test_events.py calls every
function here against a fresh ``Metrics``, which refuses a name it does not declare.
"""

from __future__ import annotations

from collections.abc import Iterable

from ccotel.metrics.counters import Metrics
from ccotel.records import BadInput

__all__ = [
    "abort",
    "call_without_envelope",
    "checkpoint_failed",
    "declare_alerted_series",
    "export_failed",
    "format_unknown",
    "ledger_write_failed",
    "missing_transcript",
    "parse_error",
    "read",
    "reported_cost",
    "session_reset",
    "spans_dropped",
    "spans_exported",
    "watchdog_kill",
]


# -- reading --------------------------------------------------------------------------------------------


def read(metrics: Metrics, lines: int, nbytes: int) -> None:
    """Whole lines read from the transcripts (each line and byte once, across restarts)."""
    metrics.inc("ccotel_lines_read", value=lines)
    metrics.inc("ccotel_bytes_read", value=nbytes)


def parse_error(metrics: Metrics, reason: BadInput) -> None:
    """A line or file that could not be read, by the reason parse and tail name."""
    metrics.inc("ccotel_parse_errors", reason)


def call_without_envelope(metrics: Metrics, missing: str) -> None:
    """An assistant line with a message id and usage that lacks an envelope field (type, uuid,
    sessionId): its call is counted all the same, by the first field it lacks."""
    metrics.inc("ccotel_calls_without_envelope", missing)


def format_unknown(metrics: Metrics, version: str, kind: str, name: str) -> None:
    """A line type or field the transcript rules do not know (read/drift.py), by Claude Code version."""
    metrics.inc("ccotel_format_unknown", version, kind, name)


def reported_cost(metrics: Metrics, model: str, usd: float) -> None:
    """Cost Claude Code itself wrote into the transcript, beside ccotel's own estimate."""
    metrics.inc("ccotel_reported_cost_usd", model, value=usd)


# -- sessions -------------------------------------------------------------------------------------------


def session_reset(metrics: Metrics, reason: str, source: str) -> None:
    """A session restarted without its memory (a missing transcript, an orphaned tool_use, a log's reason)."""
    metrics.inc("ccotel_session_resets", reason, source)


def missing_transcript(metrics: Metrics, kind: str) -> None:
    """A session's or subagent's transcript that should be on disk and is not."""
    metrics.inc("ccotel_missing_transcripts", kind)


def abort(metrics: Metrics, reason: str, source: str) -> None:
    """An orchestrator closed a session with an abort."""
    metrics.inc("ccotel_aborts", reason, source)


def watchdog_kill(metrics: Metrics, source: str) -> None:
    """An orchestrator's no-output watchdog terminated a run."""
    metrics.inc("ccotel_watchdog_kills", source)


def declare_alerted_series(metrics: Metrics, sources: Iterable[str]) -> None:
    """The series alerts watch, at 0 from the start, so that the first event is an increase Prometheus sees."""
    for reason in ("missing_transcript", "orphaned_tool_use"):
        metrics.inc("ccotel_session_resets", reason, "transcript", value=0.0)
    metrics.inc("ccotel_missing_transcripts", "session", value=0.0)
    metrics.inc("ccotel_missing_transcripts", "subagent", value=0.0)
    metrics.inc("ccotel_stalled_turns", "killed", value=0.0)
    for source in sources:
        metrics.inc("ccotel_session_resets", "missing_transcript", source, value=0.0)
        metrics.inc("ccotel_aborts", "abort", source, value=0.0)
        metrics.inc("ccotel_watchdog_kills", source, value=0.0)


# -- delivery and state ---------------------------------------------------------------------------------


def spans_exported(metrics: Metrics, n: int) -> None:
    """Spans the trace backend took (counted when their batch is final)."""
    metrics.inc("ccotel_spans_exported", value=float(n), channel="delivered")


def spans_dropped(metrics: Metrics, reason: str, n: int) -> None:
    """Spans refused for good, by the reason the backend's answer gives."""
    metrics.inc("ccotel_spans_dropped", reason, value=float(n), channel="delivered")


def export_failed(metrics: Metrics) -> None:
    """An export attempt that failed and will be tried again (ccotel's own work: saved whenever it changed)."""
    metrics.inc("ccotel_export_failures", channel="own")


def checkpoint_failed(metrics: Metrics, reason: str) -> None:
    """A checkpoint write that failed: held and retried, nothing lost."""
    metrics.inc("ccotel_checkpoint_errors", reason, channel="own")


def ledger_write_failed(metrics: Metrics, reason: str = "ledger") -> None:
    """A usage-ledger write that failed: its rows are kept and written again; tracing and counting go on.
    ``reason``: the disk's (disk_full, read_only, io_error) when it is the disk's, else ``ledger``."""
    metrics.inc("ccotel_checkpoint_errors", reason, channel="own")


# -- the /metrics server --------------------------------------------------------------------------


def metrics_connection_evicted(metrics: Metrics) -> None:
    """A connection to /metrics closed to make room for a new one (ccotel's own: saved whenever it changed)."""
    metrics.inc("ccotel_metrics_connections_evicted", channel="own")
