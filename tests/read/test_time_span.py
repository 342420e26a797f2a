"""discover.time_span (which orders a history's sessions, oldest first) reads 8 KiB at each end
before 64 KiB: the same first and last timestamps as reading the 64 KiB at once, held so by
hypothesis over files made to break it (long lines across both bounds, timestamps nested or cut,
no final newline, files shorter than either window)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read import discover
from ccotel.read.parse_time import parse_timestamp


def _reference(path: str) -> tuple[int, int]:
    """The first and last timestamps in the first and last 64 KiB, as time_span always gave."""
    def stamps(chunk: bytes) -> list[int]:
        out = []
        for line in chunk.split(b"\n"):
            i = line.find(b'"timestamp":"')
            if i >= 0:
                ts = parse_timestamp(line[i + 13: i + 53].split(b'"', 1)[0].decode("ascii", "replace"))
                if ts is not None:
                    out.append(ts)
        return out

    with open(path, "rb") as f:
        head = f.read(1 << 16)
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - (1 << 16)))
        tail = f.read(1 << 16)
    first_stamps, last_stamps = stamps(head), stamps(tail)
    first = first_stamps[0] if first_stamps else 0
    return (first, last_stamps[-1] if last_stamps else first)


_STAMP = st.builds(lambda d, h, m, s, ms: f"2025-0{d}-1{h}T0{m}:1{s}:2{s}.{ms:03d}Z",
                   st.integers(1, 9), st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.integers(0, 999))
_LINE = st.one_of(
    st.builds(lambda ts, pad: '{"type":"user","timestamp":"' + ts + '","x":"' + "a" * pad + '"}',
              _STAMP, st.integers(0, 20_000)),
    st.builds(lambda ts, inner, pad: '{"toolUseResult":{"timestamp":"' + inner + '"},"x":"' + "b" * pad
              + '","timestamp":"' + ts + '"}', _STAMP, _STAMP, st.integers(0, 70_000)),
    st.builds(lambda pad: '{"type":"api-request-shape","x":"' + "c" * pad + '"}', st.integers(0, 70_000)),
    st.builds(lambda ts: '{"timestamp":"' + ts[:12], _STAMP),  # a stamp cut short
    st.just(""),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, max_size=12), newline_at_end=st.booleans())
def test_the_time_span_equals_reading_64_kib_at_each_end(tmp_path_factory, lines, newline_at_end):
    path = tmp_path_factory.mktemp("span") / "s.jsonl"
    text = "\n".join(lines) + ("\n" if newline_at_end and lines else "")
    path.write_text(text)
    assert discover.time_span(str(path)) == _reference(str(path))


def test_a_file_that_cannot_be_read_has_no_time_span(tmp_path):
    assert discover.time_span(str(tmp_path / "gone.jsonl")) == (0, 0)


def test_a_stamp_cut_by_the_first_8_kib_is_not_taken(tmp_path):
    """The 8 KiB head ends inside the first line's timestamp, at each place in it: a cut
    '2025-01-10T01:12:22.1' still parses, to another time; the whole line (64 KiB) decides."""
    stamp = "2025-01-10T01:12:22.123Z"
    prefix = '{"type":"user","timestamp":"'
    for cut in range(1, len(stamp)):
        pad = discover._SPAN_PROBE - cut - len(prefix) - len('{"x":"",') + 1
        line = '{"x":"' + "p" * pad + '",' + prefix[1:] + stamp + '"}'
        assert line.index(stamp) + cut == discover._SPAN_PROBE
        path = tmp_path / f"cut{cut}.jsonl"
        path.write_text(line + "\n" + '{"timestamp":"2025-02-01T00:00:00.000Z"}\n')
        assert discover.time_span(str(path)) == _reference(str(path)) == (1736471542123000000, 1738368000000000000)
