"""Parsing and tailing of bad and awkward input: counted, never fatal, nothing lost or doubled."""

from __future__ import annotations

import os

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read.parse import parse_line
from ccotel.read.parse_time import parse_timestamp
from ccotel.read.tail import Tailer

GOOD = orjson.dumps({"type": "user", "uuid": "u1", "sessionId": "s", "timestamp": "2025-06-01T12:00:00.123Z",
                     "message": {"role": "user", "content": "hi"}})
SUMMARY = b'{"type":"summary","summary":"title","leafUuid":"u1"}'


def test_timestamp():
    assert parse_timestamp("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert parse_timestamp("2025-06-01T12:00:00.123Z") == 1748779200123000000
    assert parse_timestamp("2025-06-01T14:00:00.123+02:00") == 1748779200123000000
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp(12) is None


def test_glued_objects_on_one_line_are_both_kept():
    res = parse_line(GOOD + SUMMARY, 0)
    assert [e.type for e in res.entries] == ["user", "summary"]
    assert res.errors == []


def test_malformed_then_valid_object_on_one_line():
    res = parse_line(b'{"type":"user","uu' + SUMMARY, 0)
    assert [e.type for e in res.entries] == ["summary"]
    assert res.errors == ["malformed_json"]


def test_wrong_types_are_counted_and_the_line_kept():
    obj = {"type": "assistant", "uuid": 5, "sessionId": "s", "timestamp": "x",
           "message": {"id": "m", "usage": "lots", "content": {"type": "text"}}}
    res = parse_line(orjson.dumps(obj), 0)
    assert len(res.entries) == 1
    e = res.entries[0]
    assert e.uuid is None and e.usage is None and e.blocks == ()
    assert res.errors == ["bad_timestamp"]  # one line, one error: the first reason found


def test_not_an_object_invalid_utf8_and_nul():
    assert parse_line(b"[1,2]", 0).errors == ["not_an_object"]
    res = parse_line(b'{"type":"x","a":"\xff"}', 0)
    assert "invalid_utf8" in res.errors and [e.type for e in res.entries] == ["x"]
    res = parse_line(b'{"type":"x"}\x00\x00', 0)
    assert "nul_bytes" in res.errors and [e.type for e in res.entries] == ["x"]


def test_unknown_types_and_fields_pass():
    res = parse_line(b'{"type":"brand-new","uuid":"u","futureField":{"a":1}}', 0)
    assert res.errors == [] and res.entries[0].type == "brand-new"


def write(path: str, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(data)


def test_partial_line_is_held_until_complete(tmp_path):
    p = str(tmp_path / "s.jsonl")
    write(p, GOOD + b"\n" + GOOD[:10], "wb")
    t = Tailer(p)
    assert [ln.data for ln in t.read().lines] == [GOOD]
    assert t.read().lines == []
    write(p, GOOD[10:] + b"\n")
    lines = t.read().lines
    assert [ln.data for ln in lines] == [GOOD] and lines[0].offset == len(GOOD) + 1


def test_final_line_without_newline_taken_only_when_it_parses(tmp_path):
    p = str(tmp_path / "s.jsonl")
    write(p, GOOD + b"\n" + GOOD, "wb")
    t = Tailer(p)
    assert len(t.read(accept_unterminated=True).lines) == 2
    write(p, b"\n" + SUMMARY)  # appended later: not glued, read as its own line
    assert [ln.data for ln in t.read(accept_unterminated=True).lines] == [SUMMARY]
    write(p, b"\n" + GOOD[:20])
    assert t.read(accept_unterminated=True).lines == []  # half a line is not taken


def test_over_long_line_skipped_with_bounded_memory(tmp_path):
    p = str(tmp_path / "s.jsonl")
    big = b'{"type":"user","x":"' + b"a" * (3 << 20) + b'"}'
    write(p, GOOD + b"\n" + big + b"\n" + GOOD + b"\n", "wb")
    t = Tailer(p, max_line_bytes=1 << 20)
    res = t.read()
    assert [ln.data for ln in res.lines] == [GOOD, GOOD]
    assert res.errors == ["line_too_long"]


def test_over_long_line_arriving_in_pieces(tmp_path):
    p = str(tmp_path / "s.jsonl")
    t = Tailer(p, max_line_bytes=1000)
    write(p, b'{"x":"' + b"a" * 5000, "wb")
    assert t.read().lines == []
    write(p, b"a" * 5000)
    assert t.read().lines == []
    write(p, b'"}\n' + GOOD + b"\n")
    res = t.read()
    assert [ln.data for ln in res.lines] == [GOOD] and res.errors == ["line_too_long"]


def test_truncated_file_is_read_again(tmp_path):
    p = str(tmp_path / "s.jsonl")
    write(p, GOOD + b"\n" + GOOD + b"\n", "wb")
    t = Tailer(p)
    assert len(t.read().lines) == 2
    write(p, SUMMARY + b"\n", "wb")
    res = t.read()
    assert res.reset and [ln.data for ln in res.lines] == [SUMMARY]


def test_replaced_file_is_read_again(tmp_path):
    p = str(tmp_path / "s.jsonl")
    write(p, (GOOD + b"\n") * 20, "wb")
    t = Tailer(p)
    assert len(t.read().lines) == 20
    os.unlink(p)
    write(p, (SUMMARY + b"\n") * 30, "wb")  # larger than before, new inode
    res = t.read()
    assert res.reset and len(res.lines) == 30


def test_deleted_file_reports_gone(tmp_path):
    p = str(tmp_path / "s.jsonl")
    write(p, GOOD + b"\n", "wb")
    t = Tailer(p)
    t.read()
    os.unlink(p)
    assert t.read().gone


lines_strategy = st.lists(
    st.one_of(
        st.just(GOOD), st.just(SUMMARY), st.just(GOOD + SUMMARY), st.just(b"{broken"), st.just(b""),
        st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(lines=lines_strategy, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8))
def test_any_split_of_the_stream_reads_the_same_lines(tmp_path_factory, lines, cuts):
    data = b"".join(ln + b"\n" for ln in lines)
    d = tmp_path_factory.mktemp("split")
    whole = str(d / "whole.jsonl")
    write(whole, data, "wb")
    expected = [(ln.offset, ln.data) for ln in Tailer(whole).read().lines]
    pieces = str(d / "pieces.jsonl")
    write(pieces, b"", "wb")
    t = Tailer(pieces)
    got = []
    prev = 0
    for cut in sorted(c for c in cuts if c < len(data)) + [len(data)]:
        write(pieces, data[prev:cut])
        prev = cut
        got.extend((ln.offset, ln.data) for ln in t.read().lines)
    assert got == expected
    assert [d for _, d in got] == [ln for ln in lines if ln]


def _lines_in_slices(t: Tailer, max_bytes: int, **kw: object) -> tuple[list[bytes], int]:
    out: list[bytes] = []
    reads = 0
    while True:
        res = t.read(max_bytes=max_bytes, **kw)  # type: ignore[arg-type]
        reads += 1
        out += [line.data for line in res.lines]
        if not res.more:
            return out, reads


def test_slices_read_every_line_once_and_never_cut_a_long_one(tmp_path):
    """Reader.read takes a history a few MB at a time: the same lines as one read, in order; a line
    longer than a slice is read whole; an unterminated last line is taken only at the real end."""
    lines = [orjson.dumps({"i": i, "pad": "x" * (i * 37 % 3000)}) for i in range(400)]
    lines.insert(200, orjson.dumps({"big": "y" * 200_000}))  # longer than the slices below
    tail = orjson.dumps({"last": "no newline yet"})
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n" + tail)
    whole = Tailer(str(path)).read(accept_unterminated=True)
    assert [x.data for x in whole.lines] == lines + [tail] and not whole.more
    for max_bytes in (1, 5_000, 70_000, 1 << 20):
        got, reads = _lines_in_slices(Tailer(str(path)), max_bytes, accept_unterminated=True, force_tail=True)
        assert got == lines + [tail], max_bytes
        assert reads > 1 if max_bytes < 1 << 20 else reads >= 1
    t = Tailer(str(path))
    got, _ = _lines_in_slices(t, 5_000)
    assert got == lines and t.offset == path.stat().st_size - len(tail)  # the partial line waits


def test_unterminated_line_is_taken_once_the_file_is_quiet(tmp_path):
    """quiet_before_ns: the tail is forced when the file was last written before that time (its
    writer is gone), read from the same fstat as the rest: no extra stat per read."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n{"broken": ')
    mtime = path.stat().st_mtime_ns
    t = Tailer(str(path))
    assert [x.data for x in t.read(accept_unterminated=True, quiet_before_ns=mtime - 1).lines] == [b'{"a": 1}']
    assert [x.data for x in t.read(accept_unterminated=True, quiet_before_ns=mtime).lines] == [b'{"broken": ']
