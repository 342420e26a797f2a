"""A transcript rewritten in place (the same inode, the same first lines, longer than what was
read) is read again from its start: the offset marker (a digest of the last bytes read before
the offset) no longer matches. An append never resets; a marker is checked only when the file
changed (its size or mtime) and once after a restart, never re-read on an idle poll."""

from __future__ import annotations

import os

import orjson

from ccotel.read import tail
from ccotel.read.tail import Tailer


def line(n: int, tag: str = "a") -> bytes:
    """A line as Claude Code writes them (its uuid and timestamp last), all of one length: a
    rewrite puts a line end exactly where one was, so only the marker's bytes tell them apart."""
    return orjson.dumps({"type": "user", "sessionId": "s", "message": {"role": "user", "content": "x" * 300},
                         "uuid": f"{tag}{n:07d}-0000-4000-8000-000000000000",
                         "timestamp": f"2026-01-01T00:00:{n % 60:02d}.000Z"}) + b"\n"


def rewrite_in_place(path: str, data: bytes) -> None:
    """Write ``data`` over the file's bytes, keeping its inode (open r+b, write, truncate)."""
    ino = os.stat(path).st_ino
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
    assert os.stat(path).st_ino == ino


def old_and_new() -> tuple[bytes, bytes]:
    """Ten lines, then the same first three lines followed by 30 others: longer, same head."""
    old = b"".join(line(i) for i in range(10))
    new = b"".join(line(i) for i in range(3)) + b"".join(line(i, "b") for i in range(30))
    assert len(new) > len(old) and new[:1000] == old[:1000]
    return old, new


def test_rewritten_in_place_while_followed_is_read_from_the_start(tmp_path):
    p = str(tmp_path / "s.jsonl")
    old, new = old_and_new()
    with open(p, "wb") as f:
        f.write(old)
    t = Tailer(p)
    assert len(t.read().lines) == 10
    rewrite_in_place(p, new)
    res = t.read()
    assert res.reset and not res.errors
    assert [ln.data + b"\n" for ln in res.lines] == new.splitlines(keepends=True)
    assert t.offset == len(new)


def test_rewritten_in_place_while_stopped_is_read_from_the_start(tmp_path):
    """A restart: the checkpoint's identity, offset and marker, a new Tailer."""
    p = str(tmp_path / "s.jsonl")
    old, new = old_and_new()
    with open(p, "wb") as f:
        f.write(old)
    first = Tailer(p)
    assert len(first.read().lines) == 10
    saved = (first.identity, first.offset, first.checkpoint_marker())
    assert saved[2] is not None and saved[2].end == len(old)
    rewrite_in_place(p, new)
    again = Tailer(p, offset=saved[1], identity=saved[0], marker=saved[2])
    res = again.read()
    assert res.reset and not res.errors
    assert len(res.lines) == 33


def test_a_marker_behind_the_offset_catches_a_shrink_below_what_was_read(tmp_path):
    """After a restart the tailer re-reads from the checkpoint (an open turn's first line): a file
    cut between that offset and what had been read is a rewrite, not an append."""
    p = str(tmp_path / "s.jsonl")
    old = b"".join(line(i) for i in range(10))
    with open(p, "wb") as f:
        f.write(old)
    first = Tailer(p)
    first.read()
    at_line_5 = len(b"".join(line(i) for i in range(5)))
    rewrite_in_place(p, old[:at_line_5] + line(5, "c"))  # shorter than what was read, longer than the offset
    again = Tailer(p, offset=at_line_5, identity=first.identity, marker=first.checkpoint_marker())
    res = again.read()
    assert res.reset and [ln.data + b"\n" for ln in res.lines][-1] == line(5, "c")


def test_appends_and_a_restart_on_an_unchanged_file_never_reset(tmp_path):
    p = str(tmp_path / "s.jsonl")
    with open(p, "wb") as f:
        f.write(line(0))
    t = Tailer(p)
    seen = len(t.read().lines)
    for i in range(1, 40):
        with open(p, "ab") as f:
            f.write(line(i))
        res = t.read()
        assert not res.reset
        seen += len(res.lines)
    assert seen == 40
    again = Tailer(p, offset=len(line(0)) * 3, identity=t.identity, marker=t.checkpoint_marker())
    res = again.read()
    assert not res.reset and len(res.lines) == 37  # re-read up to the marker, nothing more


def test_a_checkpoint_without_a_marker_is_trusted(tmp_path):
    """A state written before markers: read on from its offset, as before."""
    p = str(tmp_path / "s.jsonl")
    old, new = old_and_new()
    with open(p, "wb") as f:
        f.write(old)
    first = Tailer(p)
    first.read()
    with open(p, "ab") as f:
        f.write(line(10))
    again = Tailer(p, offset=first.offset, identity=first.identity, marker=None)
    res = again.read()
    assert not res.reset and [ln.data + b"\n" for ln in res.lines] == [line(10)]
    assert (m := again.checkpoint_marker()) is not None and m.end == again.offset


def test_the_marker_is_not_read_again_while_the_file_is_unchanged(tmp_path, monkeypatch):
    p = str(tmp_path / "s.jsonl")
    with open(p, "wb") as f:
        f.write(b"".join(line(i) for i in range(5)))
    t = Tailer(p)
    t.read()
    checks = []
    real = tail._holds
    monkeypatch.setattr(tail, "_holds", lambda fd, end, n, expected: checks.append(end) or real(fd, end, n, expected))
    for _ in range(5):
        assert not t.read().lines  # idle polls
    assert checks == []
    with open(p, "ab") as f:
        f.write(line(5))
    assert len(t.read().lines) == 1
    assert len(checks) == 1


def test_our_own_unterminated_last_line_is_not_taken_for_a_rewrite(tmp_path):
    """A last line taken without its newline (the writer was gone): the marker holds those bytes,
    so the newline that may follow later is an append."""
    p = str(tmp_path / "s.jsonl")
    with open(p, "wb") as f:
        f.write(line(0) + line(1)[:-1])
    t = Tailer(p)
    assert len(t.read(force_tail=True).lines) == 2
    with open(p, "ab") as f:
        f.write(b"\n" + line(2))
    res = t.read()
    assert not res.reset and [ln.data + b"\n" for ln in res.lines] == [line(2)]
