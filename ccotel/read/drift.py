"""Format drift: line types and top-level fields the transcript rules do not know, by Claude Code
version, so an operator sees a new release change the format (``ccotel_format_unknown_total``).

Every line's type is checked (a set lookup). Fields are checked on a sample: the first
``sample_lines`` lines of each (version, type) a process reads are decoded whole; the fast parse
path never builds the objects it would need for every line. Label values come from transcripts,
so they are cut to 64 characters and the number of series is capped (the rest count as "other").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from ccotel.records import Entry
from ccotel.rules import transcript as rules

__all__ = ["FormatDrift"]

_MAX_LABEL = 64


@dataclass
class FormatDrift:
    sample_lines: int = 20
    max_series: int = 200
    _sampled: dict[tuple[str, str], int] = field(default_factory=dict)
    _series: set[tuple[str, str, str]] = field(default_factory=set)
    _seen_fields: set[tuple[str, str, str]] = field(default_factory=set)

    def observe(self, e: Entry, line: bytes) -> list[tuple[str, str, str]]:
        """(version, kind, name) for each unknown thing on this line: kind is line_type or field.
        An unknown field is reported once per (version, type, field) and process."""
        version = (e.version or "unknown")[:_MAX_LABEL]
        if e.type not in rules.KNOWN_LINE_TYPES:
            return [self._label(version, "line_type", e.type)]
        key = (version, e.type)
        n = self._sampled.get(key, 0)
        if n >= self.sample_lines or len(self._sampled) > 10_000:
            return []
        self._sampled[key] = n + 1
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return []  # glued objects: the next sampled line will do
        if not isinstance(obj, dict):
            return []
        known = rules.KNOWN_FIELDS[e.type]
        out = []
        for name in obj:
            if name not in known and (version, e.type, name) not in self._seen_fields:
                self._seen_fields.add((version, e.type, name))
                out.append(self._label(version, "field", f"{e.type}.{name}"))
        return out

    def _label(self, version: str, kind: str, name: str) -> tuple[str, str, str]:
        series = (version, kind, name[:_MAX_LABEL])
        if series in self._series:
            return series
        if len(self._series) >= self.max_series:
            return ("other", kind, "other")
        self._series.add(series)
        return series
