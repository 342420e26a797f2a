"""history.jsonl is read a piece at a time, whatever its size, and appended to while it is
followed: the index is every whole line's newest prompt time per session, each line taken once,
a line being written waits for its newline, and a line longer than the limit is passed over
without being held (the first read held the whole file, which Claude Code never sweeps)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read import evidence
from ccotel.read.evidence import HistoryIndex

PIECE, LINE_MAX = 64, 256


def _line(sid: str, ts: int, pad: int) -> bytes:
    return orjson.dumps({"display": "x" * pad, "timestamp": ts, "sessionId": sid}) + b"\n"


lines_st = st.lists(st.one_of(
    st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.integers(0, 10**13), st.integers(0, 150)),
    st.tuples(st.just("long"), st.integers(0, 10**13), st.integers(LINE_MAX + 3 * PIECE, 3 * LINE_MAX)),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(lines=lines_st, cuts=st.lists(st.integers(0, 1 << 14), max_size=6))
def test_pieces_and_appends_give_the_whole_lines_index(tmp_path_factory: pytest.TempPathFactory,
                                                       lines: list[tuple[str, int, int]], cuts: list[int]) -> None:
    path = tmp_path_factory.mktemp("h") / "history.jsonl"
    data = b"".join(_line(*t) for t in lines) + b'{"sessionId": "s4", "timest'  # and a line being written
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "_HISTORY_PIECE", PIECE)
        mp.setattr(evidence, "_HISTORY_LINE_MAX", LINE_MAX)
        index = HistoryIndex(str(path), str(path.parent))
        path.write_bytes(b"")
        for cut in sorted(c % (len(data) + 1) for c in cuts) + [len(data)]:  # appended in steps
            with open(path, "r+b") as f:
                f.seek(0, 2)
                f.write(data[f.tell():cut] if cut > f.tell() else b"")
            got = dict(index.update())
    want: dict[str, float] = {}
    for sid, ts, _pad in lines:
        if sid != "long":
            want[sid] = max(want.get(sid, 0.0), ts / 1000)
    assert got == want
    assert index.offset == data.rfind(b"\n") + 1


def test_a_first_read_holds_a_piece_not_the_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"".join(_line(f"s{i % 7}", i, 2000) for i in range(3000)))  # ~6 MB
    sizes: list[int] = []
    real_open = evidence.open_regular

    def recording_open(p: str, buffering: int = -1):  # type: ignore[no-untyped-def]
        f = real_open(p, buffering)
        read = f.read
        f.read = lambda n=-1: (sizes.append(n), read(n))[1]  # type: ignore[method-assign]
        return f

    monkeypatch.setattr(evidence, "open_regular", recording_open)
    index = HistoryIndex(str(path), str(tmp_path))
    assert len(index.update()) == 7
    assert sizes and max(sizes) == evidence._HISTORY_PIECE and -1 not in sizes
