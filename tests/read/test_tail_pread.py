"""The tail stage reads by position, sized to what its fstat showed: a short read past that size is
the end only when no partial line waits. Whatever the file system gives (short reads anywhere, a
file that grew after the fstat), every line is read once, in order, and an unterminated last line
is never taken before the real end of the file."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read import tail
from ccotel.read.tail import Tailer

lines_st = st.lists(st.binary(min_size=0, max_size=9000).map(lambda b: orjson.dumps({"b": b.hex()})),
                    min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(lines=lines_st, cap=st.integers(min_value=1, max_value=70_000),
       shrink=st.integers(min_value=0, max_value=70_000),
       tail_bytes=st.integers(min_value=0, max_value=40), force=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=120_000), max_size=4))
def test_short_reads_and_an_old_fstat_read_every_line_once(tmp_path_factory, lines, cap, shrink, tail_bytes, force,
                                                           cuts):
    d = tmp_path_factory.mktemp("pread")
    last = orjson.dumps({"last": "x" * 50})
    data = b"".join(ln + b"\n" for ln in lines) + last[:tail_bytes]  # maybe a partial last line
    path = d / "a.jsonl"
    whole_path = d / "whole.jsonl"
    whole_path.write_bytes(data)
    path.write_bytes(b"")
    whole = Tailer(str(whole_path)).read(accept_unterminated=True, force_tail=force)
    expected = [(ln.offset, ln.data) for ln in whole.lines]
    real_pread, real_fstat = os.pread, os.fstat

    def capped(fd: int, n: int, offset: int) -> bytes:  # a file system that gives less than asked
        return real_pread(fd, min(n, cap), offset)

    calls = [0]

    def old_fstat(fd: int) -> os.stat_result:  # every other one: the file grew after it by `shrink` bytes
        s = real_fstat(fd)
        calls[0] += 1
        if calls[0] % 2 == 0:
            return s
        return os.stat_result((s.st_mode, s.st_ino, s.st_dev, s.st_nlink, s.st_uid, s.st_gid,
                               max(s.st_size - shrink, t.offset), s.st_atime, s.st_mtime, s.st_ctime))

    t = Tailer(str(path))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tail.os, "pread", capped)
        m.setattr(tail.os, "fstat", old_fstat)
        got = []
        prev = 0
        for cut in sorted(c for c in cuts if c < len(data)):  # written in pieces, read between them
            with open(path, "ab") as f:
                f.write(data[prev:cut])
            prev = cut
            got += [(ln.offset, ln.data) for ln in t.read().lines]
        with open(path, "ab") as f:
            f.write(data[prev:])
        # One read with a true fstat takes every line left, however short the reads (nothing may
        # wait for a next event that will not come); a partial last line only if it parses, or
        # forced (then only at the real end of the file).
        m.setattr(tail.os, "fstat", real_fstat)
        got += [(ln.offset, ln.data) for ln in t.read(accept_unterminated=True, force_tail=force).lines]
    assert got == expected
    in_lines = sum(len(ln) + 1 for ln in lines)
    assert t.offset == (len(data) if tail_bytes == len(last) or force else in_lines)


def test_a_short_read_past_the_fstat_ending_a_line_needs_no_second_read(tmp_path, monkeypatch):
    """The common live read: the new lines in one pread, no read to see the end."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\n')
    t = Tailer(str(path))
    t.read()
    with open(path, "ab") as f:
        f.write(b'{"a":2}\n{"a":3}\n')
    calls: list[tuple[int, int]] = []
    real = os.pread
    monkeypatch.setattr(tail.os, "pread", lambda fd, n, off: calls.append((n, off)) or real(fd, n, off))
    res = t.read()
    assert [ln.data for ln in res.lines] == [b'{"a":2}', b'{"a":3}']
    data_reads = [c for c in calls if c[1] > 0]  # (the head fingerprint is read at 0)
    assert len(data_reads) == 1 and data_reads[0][1] == 8


def test_a_fifo_named_like_a_transcript_does_not_block(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    os.mkfifo(path)
    res = Tailer(str(path)).read()
    assert res.lines == []


def test_a_forced_tail_is_the_real_end_even_after_a_short_read_past_an_old_fstat(tmp_path, monkeypatch):
    """A short read past the fstat's size with a partial line pending is not the end: reading goes
    on until a read finds nothing, and only then is the unterminated line taken (forced)."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":"' + b"x" * 100)
    real_pread, real_fstat = os.pread, os.fstat
    monkeypatch.setattr(tail.os, "pread", lambda fd, n, off: real_pread(fd, min(n, 10), off))

    def old_fstat(fd: int) -> os.stat_result:
        s = real_fstat(fd)
        return os.stat_result((s.st_mode, s.st_ino, s.st_dev, s.st_nlink, s.st_uid, s.st_gid, 5,
                               s.st_atime, s.st_mtime, s.st_ctime))

    monkeypatch.setattr(tail.os, "fstat", old_fstat)
    t = Tailer(str(path))
    res = t.read(accept_unterminated=True, force_tail=True)
    assert [ln.data for ln in res.lines] == [b'{"a":1}', b'{"b":"' + b"x" * 100]
