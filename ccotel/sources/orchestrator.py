"""Orchestrator logs: the failures a driver of Claude Code sees, one log line each.

OpenClaw's gateway, for one, logs
  ``[agent/cli-backend] cli session reset: provider=claude-cli reason=missing-transcript``
  ``claude live session close: provider=claude-cli model=... reason=abort``
  ``decision=candidate_failed ... detail=CLI produced no output for 180s and was terminated.``
The patterns live here, in one table; ``--orchestrator-patterns FILE`` adds more (JSON list of
{"metric", "regex", "reason"?}). Reasons are normalised (missing-transcript ->
missing_transcript) so one alert covers transcripts and logs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import orjson

from ccotel.metrics.counters import Metrics
from ccotel.read.tail import Tailer

__all__ = ["Pattern", "DEFAULT_PATTERNS", "OrchestratorLog", "load_patterns", "parse_log_arg"]


@dataclass(frozen=True)
class Pattern:
    metric: str  # ccotel_session_resets | ccotel_aborts | ccotel_watchdog_kills
    regex: re.Pattern[str]
    reason: str | None = None  # fixed reason when the regex has no (?P<reason>...) group


DEFAULT_PATTERNS: tuple[Pattern, ...] = (
    Pattern("ccotel_session_resets", re.compile(r"cli session reset:.*?\breason=(?P<reason>[\w.-]+)")),
    Pattern("ccotel_aborts", re.compile(r"live session close:.*?\breason=(?P<reason>abort[\w.-]*)")),
    Pattern("ccotel_watchdog_kills", re.compile(r"produced no output for \d+s and was terminated")),
)
_METRICS_WITH_REASON = {"ccotel_session_resets", "ccotel_aborts"}


def load_patterns(path: str) -> tuple[Pattern, ...]:
    with open(path, "rb") as f:
        doc = orjson.loads(f.read())
    out = []
    for item in doc:
        metric = item["metric"]
        if metric not in ("ccotel_session_resets", "ccotel_aborts", "ccotel_watchdog_kills"):
            raise ValueError(f"{path}: unknown metric {metric!r}")
        out.append(Pattern(metric, re.compile(item["regex"]), item.get("reason")))
    return tuple(out)


def parse_log_arg(value: str) -> tuple[str, str]:
    """PATH or PATH=SOURCE -> (absolute path, source label)."""
    path, sep, source = value.partition("=")
    path = os.path.abspath(os.path.expanduser(path))
    if not sep:
        source = os.path.splitext(os.path.basename(path))[0] or "orchestrator"
    return path, source


def normalise(reason: str) -> str:
    return reason.strip().lower().replace("-", "_")


@dataclass
class OrchestratorLog:
    path: str
    source: str
    tailer: Tailer
    patterns: tuple[Pattern, ...] = DEFAULT_PATTERNS
    saved_offset: int = -1

    def read(self, metrics: Metrics | None, count: bool) -> int:
        """Count matching lines appended since the last read. Returns lines read."""
        res = self.tailer.read(accept_unterminated=False)
        for line in res.lines:
            if not count or metrics is None:
                continue
            text = line.data.decode("utf-8", "replace")
            for p in self.patterns:
                m = p.regex.search(text)
                if m is None:
                    continue
                if p.metric in _METRICS_WITH_REASON:
                    reason = m.groupdict().get("reason") or p.reason or "unknown"
                    metrics.inc(p.metric, normalise(reason), self.source)
                else:
                    metrics.inc(p.metric, self.source)
                break
        return len(res.lines)
