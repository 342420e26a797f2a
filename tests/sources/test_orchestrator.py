"""Orchestrator log lines counted as resets, aborts and watchdog kills, once, across restarts."""

from __future__ import annotations

import os

from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State

LINES = [
    "2026-03-01T10:00:00Z [agent/cli-backend] cli session reset: provider=claude-cli reason=missing-transcript",
    "2026-03-01T10:00:01Z claude live session close: provider=claude-cli model=opus reason=abort",
    "2026-03-01T10:00:02Z decision=candidate_failed provider=claude-cli reason=timeout "
    "detail=CLI produced no output for 180s and was terminated.",
    "2026-03-01T10:00:03Z [agent/cli-backend] cli session reset: provider=claude-cli reason=orphaned-tool-use",
    "2026-03-01T10:00:04Z unrelated line reason=abort",
]


def start(tmp_path, log_path: str, metrics: Metrics) -> Pipeline:
    root = str(tmp_path / "claude")
    os.makedirs(os.path.join(root, "projects"), exist_ok=True)
    p = Pipeline(Options(roots=(root,), orchestrator_logs=((log_path, "openclaw"),)), emit=lambda s: None,
                 state=State(str(tmp_path / "st")), metrics=metrics)
    p.backfill()
    return p


def test_log_lines_are_counted_once_and_history_is_not(tmp_path):
    log_path = str(tmp_path / "gateway.log")
    with open(log_path, "w") as f:
        f.write(LINES[0] + "\n")  # before ccotel ever ran: history
    m = Metrics()
    p = start(tmp_path, log_path, m)
    with open(log_path, "a") as f:
        f.write("\n".join(LINES) + "\n" + LINES[1][:20])  # a partial line at the end
    p.tick()
    assert m.value("ccotel_session_resets", "missing_transcript", "openclaw") == 1
    assert m.value("ccotel_session_resets", "orphaned_tool_use", "openclaw") == 1
    assert m.value("ccotel_aborts", "abort", "openclaw") == 1
    assert m.value("ccotel_watchdog_kills", "openclaw") == 1
    # restart: nothing counted twice, the partial line completes and counts once
    m2 = Metrics()
    p2 = start(tmp_path, log_path, m2)
    with open(log_path, "a") as f:
        f.write(LINES[1][20:] + "\n")
    p2.tick()
    assert m2.value("ccotel_session_resets", "missing_transcript", "openclaw") == 1
    assert m2.value("ccotel_aborts", "abort", "openclaw") == 2
    assert m2.value("ccotel_watchdog_kills", "openclaw") == 1


def test_extra_patterns_by_configuration(tmp_path):
    import re

    from ccotel.sources.orchestrator import DEFAULT_PATTERNS, Pattern, load_patterns

    cfg = tmp_path / "patterns.json"
    cfg.write_text('[{"metric": "ccotel_watchdog_kills", "regex": "watchdog: killed pid \\\\d+"}]')
    extra = load_patterns(str(cfg))
    assert extra == (Pattern("ccotel_watchdog_kills", re.compile(r"watchdog: killed pid \d+")),)
    log_path = str(tmp_path / "other.log")
    open(log_path, "w").close()
    root = str(tmp_path / "claude")
    os.makedirs(os.path.join(root, "projects"))
    m = Metrics()
    p = Pipeline(Options(roots=(root,), orchestrator_logs=((log_path, "other"),),
                         orchestrator_patterns=DEFAULT_PATTERNS + extra), emit=lambda s: None, metrics=m)
    p.backfill()
    with open(log_path, "a") as f:
        f.write("12:00 watchdog: killed pid 4242\n")
    p.tick()
    assert m.value("ccotel_watchdog_kills", "other") == 1
