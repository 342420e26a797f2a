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
from ccotel.read.regular import open_regular
from ccotel.read.tail import Tailer

__all__ = ["Pattern", "PatternFileError", "DEFAULT_PATTERNS", "OrchestratorLog", "load_patterns", "parse_log_arg"]


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


class PatternFileError(ValueError):
    """An ``--orchestrator-patterns`` file that cannot be read or is not a list of patterns."""


_PATTERN_FILE_MAX = 1 << 20  # a list of a few patterns; more is not one
_PATTERN_METRICS = tuple(dict.fromkeys(p.metric for p in DEFAULT_PATTERNS))  # the metrics a pattern may count


def load_patterns(path: str) -> tuple[Pattern, ...]:
    """The patterns of an ``--orchestrator-patterns`` file: a JSON list of {"metric", "regex",
    "reason"?}. PatternFileError says what is wrong with it, naming the file and the item."""
    try:
        with open_regular(path) as f:
            data = f.read(_PATTERN_FILE_MAX + 1)
        if len(data) > _PATTERN_FILE_MAX:
            raise PatternFileError(f"{path}: larger than {_PATTERN_FILE_MAX >> 20} MiB: not a list of patterns")
        doc = orjson.loads(data)
    except OSError as exc:
        raise PatternFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise PatternFileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, list):
        raise PatternFileError(f'{path}: not a JSON list of {{"metric", "regex", "reason"?}}')
    return tuple(_pattern(path, i, item) for i, item in enumerate(doc))


def _pattern(path: str, i: int, item: object) -> Pattern:
    where = f"{path}: item {i}"
    if not isinstance(item, dict) or not isinstance(item.get("metric"), str) or not isinstance(item.get("regex"), str):
        raise PatternFileError(f'{where}: not {{"metric": "...", "regex": "..."}}')
    metric, reason = item["metric"], item.get("reason")
    if metric not in _PATTERN_METRICS:
        raise PatternFileError(f"{where}: unknown metric {metric!r} (one of {', '.join(_PATTERN_METRICS)})")
    if reason is not None and not isinstance(reason, str):
        raise PatternFileError(f"{where}: its reason is not a string")
    try:
        regex = re.compile(item["regex"])
    except re.error as exc:
        raise PatternFileError(f"{where}: not a regular expression ({exc})") from None
    return Pattern(metric, regex, reason)


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
