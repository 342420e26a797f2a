"""parse_timestamp's cached fast path gives what the general parser gives, for every string.

The fast path adds a timestamp's seconds and milliseconds to the cached start of its minute; it
is taken only for a 24-character string whose minute the general parser accepted before. The
strings below are Claude Code's shape with characters swapped for look-alikes int() reads
('+5', ' 5', other scripts' digits), separators and suffixes changed, and minutes at the ends of
the range, each parsed after a valid timestamp of the same minute filled the cache.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ccotel.read import parse_time

_TEMPLATE = "2025-06-01T18:03:19.574Z"
# characters int(), isdigit() or the separators might treat specially
_ODD = "0123456789+- _.:Zz T\u0663\u00b2\u2460\uff11a"


def _general(value: object) -> int | None:
    return parse_time._parse_timestamp(value)


def _both(value: str, warm: str) -> None:
    parse_time.parse_timestamp(warm)  # fills the cache for warm's minute (if the general parser accepts it)
    assert parse_time.parse_timestamp(value) == _general(value), value
    assert parse_time.parse_timestamp(value) == _general(value), value  # and again, cache warm for value


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 23), st.sampled_from(_ODD)), max_size=3),
       st.integers(0, 4_102_444_799_999))
@example([(17, "+")], 1748801000000)
@example([(18, " ")], 1748801000000)
@example([(20, "\u0663")], 1748801000000)
@example([(23, "z")], 1748801000000)
@example([(19, ":")], 1748801000000)
def test_fast_path_equals_the_general_parser(swaps: list[tuple[int, str]], ms: int) -> None:
    secs, msec = divmod(ms, 1000)
    warm = _stamp(secs, msec)
    value = list(warm)
    for i, ch in swaps:
        value[i] = ch
    _both("".join(value), warm)


def _stamp(secs: int, msec: int) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{msec:03d}Z"


def test_minutes_at_the_ends_of_the_range_and_odd_values() -> None:
    for warm, value in [
        ("1970-01-01T00:00:00.000Z", "1970-01-01T00:00:59.999Z"),
        ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z"),  # before 1970: None
        ("2262-04-11T23:47:16.000Z", "2262-04-11T23:47:16.854Z"),  # the last ns of int64 and past it
        ("2262-04-11T23:47:00.000Z", "2262-04-11T23:47:99.999Z"),
        ("2025-06-01T18:03:19.574Z", "2025-06-01T18:03:99.999Z"),  # 99 s: linear, as the general parser
        ("2025-06-01T18:03:19.574Z", "2025-06-01T18:03:19.574+01:00"),
        ("2025-06-01T18:03:19.574Z", "2025-06-01 18:03:19.574Z"),
        ("2025-06-01 18:03:19.574Z", "2025-06-01 18:03:20.000z"),
        ("2025-13-01T18:03:19.574Z", "2025-13-01T18:03:19.575Z"),
    ]:
        _both(value, warm)
    for value in (None, 5, b"2025-06-01T18:03:19.574Z", "", "2025-06-01T18:03:19.574"):
        assert parse_time.parse_timestamp(value) == _general(value)


def test_the_fast_path_is_taken_and_matches() -> None:
    parse_time.parse_timestamp(_TEMPLATE)
    assert _TEMPLATE[:16] in parse_time._MINUTE_NS  # a change that never fills the cache fails here
    assert parse_time.parse_timestamp("2025-06-01T18:03:42.001Z") == 1748801022001000000
    assert parse_time.parse_timestamp(_TEMPLATE) == 1748800999574000000
