"""Parse stage: a transcript timestamp -> Unix nanoseconds.

Every line carries one, and the discovery scan, the agent registry and the reports read them too,
so the usual shape (2025-06-01T12:34:56.789Z) has a cached path; the general parser is the
reference it is held to (tests/read/test_parse_timestamp_fast.py).
"""

from __future__ import annotations

import calendar
from typing import Any

__all__ = ["parse_timestamp"]

# OTLP's int64: a time past it is not a real one, and the checked path reads counts against it too.
_MAX_INT64 = 1 << 63

# Unix ns at the start of a 'YYYY-MM-DDTHH:MM' (a timestamp's first 16 characters), for the
# prefixes of timestamps the general parser accepted in Claude Code's shape; bounded.
_MINUTE_NS: dict[str, int] = {}
_MINUTE_NS_MAX = 4096
_LAST_MINUTE_NS = _MAX_INT64 - 100_000_000_000  # a minute's start plus 99.999 s still fits


def parse_timestamp(value: Any) -> int | None:
    """ISO-8601 as Claude Code writes it (2025-06-01T12:34:56.789Z) -> Unix ns.

    The usual shape costs a dict lookup and one int(): the minute's start is cached the first
    time the general parser reads a timestamp of that minute, and the seconds and milliseconds
    are added (timegm is linear in them). Only ASCII digits take this path (int() also reads
    '+5', ' 5' and other scripts' digits): anything else goes to the general parser, so both
    give the same value for every string (tests/read/test_parse_timestamp_fast.py)."""
    if type(value) is str and len(value) == 24:
        minute = _MINUTE_NS.get(value[:16])
        if minute is not None and value[19] == "." and value[23] in "Zz":
            frac = value[17:19] + value[20:23]  # seconds and milliseconds
            if frac.isdigit() and frac.isascii():
                return minute + int(frac) * 1_000_000
    ns = _parse_timestamp(value)
    if ns is not None and type(value) is str and len(value) == 24:
        _remember_minute(value, ns)
    return ns


def _remember_minute(value: str, ns: int) -> None:
    """Cache the start of the minute of a 24-character timestamp the general parser accepted."""
    frac = value[17:19] + value[20:23]
    if not (value[19] == "." and value[23] in "Zz" and frac.isdigit() and frac.isascii()):
        return
    minute = ns - int(frac) * 1_000_000
    if 0 <= minute <= _LAST_MINUTE_NS:
        if len(_MINUTE_NS) >= _MINUTE_NS_MAX:
            _MINUTE_NS.clear()
        _MINUTE_NS[value[:16]] = minute


def _parse_timestamp(value: Any) -> int | None:
    """The general parser (no caches): the reference parse_timestamp's fast path is held to."""
    if not isinstance(value, str) or len(value) < 19:
        return None
    try:
        if value[4] != "-" or value[10] not in "T ":
            return None
        secs = calendar.timegm(
            (int(value[0:4]), int(value[5:7]), int(value[8:10]),
             int(value[11:13]), int(value[14:16]), int(value[17:19]), 0, 0, 0)
        )
        frac_ns = 0
        rest = value[19:]
        if rest.startswith("."):
            digits = ""
            for ch in rest[1:]:
                if not ch.isdigit():
                    break
                digits += ch
            rest = rest[1 + len(digits):]
            frac_ns = int((digits + "000000000")[:9]) if digits else 0
        if rest and rest not in ("Z", "z"):
            sign = 1 if rest[0] == "+" else -1 if rest[0] == "-" else 0
            if sign == 0 or len(rest) < 6:
                return None
            secs -= sign * (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60)
        ns = secs * 1_000_000_000 + frac_ns
        return ns if 0 <= ns < _MAX_INT64 else None  # before 1970 or past 2262: not a real time
    except (ValueError, IndexError):
        return None
