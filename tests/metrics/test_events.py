"""Counted events go through named functions (ccotel/metrics/events.py): each one counts the series it
says, with labels its metric declares, and no code outside metrics/ names a metric at a call site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ccotel.metrics import events
from ccotel.metrics.counters import Metrics

PACKAGE = Path(__file__).resolve().parents[2] / "ccotel"


@pytest.mark.parametrize(("count", "series", "value"), [
    (lambda m: events.read(m, 3, 120), ("ccotel_lines_read",), 3.0),
    (lambda m: events.read(m, 3, 120), ("ccotel_bytes_read",), 120.0),
    (lambda m: events.parse_error(m, "malformed_json"), ("ccotel_parse_errors", "malformed_json"), 1.0),
    (lambda m: events.call_without_envelope(m, "uuid"), ("ccotel_calls_without_envelope", "uuid"), 1.0),
    (lambda m: events.format_unknown(m, "2.1.332", "field", "x"), ("ccotel_format_unknown", "2.1.332", "field", "x"),
     1.0),
    (lambda m: events.reported_cost(m, "claude-opus-4-8", 0.25), ("ccotel_reported_cost_usd", "claude-opus-4-8"),
     0.25),
    (lambda m: events.session_reset(m, "missing_transcript", "transcript"),
     ("ccotel_session_resets", "missing_transcript", "transcript"), 1.0),
    (lambda m: events.missing_transcript(m, "subagent"), ("ccotel_missing_transcripts", "subagent"), 1.0),
    (lambda m: events.abort(m, "abort", "gw"), ("ccotel_aborts", "abort", "gw"), 1.0),
    (lambda m: events.watchdog_kill(m, "gw"), ("ccotel_watchdog_kills", "gw"), 1.0),
    (lambda m: events.spans_exported(m, 7), ("ccotel_spans_exported",), 7.0),
    (lambda m: events.spans_dropped(m, "too_large", 2), ("ccotel_spans_dropped", "too_large"), 2.0),
    (lambda m: events.export_failed(m), ("ccotel_export_failures",), 1.0),
    (lambda m: events.checkpoint_failed(m, "disk_full"), ("ccotel_checkpoint_errors", "disk_full"), 1.0),
    (lambda m: events.ledger_write_failed(m), ("ccotel_checkpoint_errors", "ledger"), 1.0),
    (lambda m: events.ledger_write_failed(m, "disk_full"), ("ccotel_checkpoint_errors", "disk_full"), 1.0),
])
def test_each_event_counts_its_series(count, series, value) -> None:
    m = Metrics()
    count(m)
    assert m.value(*series) == value


def test_every_event_function_is_exercised_above() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    named = {n for n in events.__all__ if callable(getattr(events, n))}
    assert named - {"declare_alerted_series"} <= set(re.findall(r"events\.(\w+)\(m", source))


def test_alerted_series_are_declared_at_zero() -> None:
    m = Metrics()
    events.declare_alerted_series(m, ["openclaw"])
    series = m.series()
    expected = {("ccotel_session_resets", "missing_transcript", "transcript"),
                ("ccotel_session_resets", "orphaned_tool_use", "transcript"),
                ("ccotel_missing_transcripts", "session"), ("ccotel_missing_transcripts", "subagent"),
                ("ccotel_stalled_turns", "killed"), ("ccotel_session_resets", "missing_transcript", "openclaw"),
                ("ccotel_aborts", "abort", "openclaw"), ("ccotel_watchdog_kills", "openclaw")}
    assert set(series) == expected
    assert set(series.values()) == {0.0}


def test_no_metric_is_named_at_a_call_site_outside_metrics() -> None:
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "metrics":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\.inc\(\s*[\"']ccotel_", line):
                stray.append(f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}")
    assert stray == [], "count through ccotel/metrics/events.py:\n" + "\n".join(stray)
