"""A transcript rewritten in place (the same inode and first lines, longer than what was read)
is read again from its start, as a replaced file is, live and across a restart: every API call
of the new content is read and sent, none twice, and nothing is counted as bad input."""

from __future__ import annotations

import copy
import os
from collections import Counter

from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord
from ccotel.store.sqlite import SqliteState as State
from tests.transcript import Transcript
from tests.whole.test_bad_input import SID, Live, dump, main_path, spans_of_file, tool_turn, write


def old_and_new() -> tuple[bytes, bytes]:
    """A session of 4 turns, and its rewrite: the same first turn, then 20 other turns."""
    t = Transcript(SID)
    tool_turn(t, "1")
    old, new = copy.deepcopy(t), copy.deepcopy(t)
    for i in range(2, 5):
        tool_turn(old, f"o{i}")
    for i in range(2, 22):
        tool_turn(new, f"n{i}")
    a, b = b"".join(dump(old.lines)), b"".join(dump(new.lines))
    assert len(b) > len(a) and b[:2000] == a[:2000]
    return a, b


def rewrite_in_place(path: str, data: bytes) -> None:
    ino = os.stat(path).st_ino
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
    assert os.stat(path).st_ino == ino


def calls(spans: list[SpanRecord]) -> Counter[int]:
    return Counter(s.span_id for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")


def test_rewritten_in_place_while_followed(tmp_path):
    old, new = old_and_new()
    root = str(tmp_path / "claude")
    path = write(main_path(root), old)
    live = Live(root)
    live.p.backfill(close_all=True)
    rewrite_in_place(path, new)
    live.p.poll([path])
    got = live.finish()
    expected = calls(spans_of_file(str(tmp_path), new)[0])
    missing = set(expected) - set(calls(got))
    assert not missing, f"{len(missing)} of {len(expected)} API calls of the new content lost"
    assert not live.p.stats.errors
    assert live.p.stats.file_resets == 1
    assert max(calls(got).values()) == 1  # none sent twice


def test_rewritten_in_place_while_stopped(tmp_path):
    old, new = old_and_new()
    root = str(tmp_path / "claude")
    path = write(main_path(root), old)
    sent: list[SpanRecord] = []
    metrics = Metrics()
    first = Live(root, state=State(str(tmp_path / "st")), metrics=metrics, backend=sent)
    first.finish()
    first.p.process_acks()
    first.p.state.close()
    rewrite_in_place(path, new)
    metrics2 = Metrics()
    second = Live(root, state=State(str(tmp_path / "st")), metrics=metrics2, backend=sent)
    second.finish()
    second.p.process_acks()
    expected = calls(spans_of_file(str(tmp_path), new)[0])
    missing = set(expected) - set(calls(sent))
    assert not missing, f"{len(missing)} of {len(expected)} API calls of the new content lost"
    assert not second.p.stats.errors
    assert second.p.stats.file_resets == 1
    assert max(calls(sent).values()) == 1  # the first turn, delivered before the restart, is not sent again
    # its calls are not counted again either (the first run's history was traces only)
    assert metrics2.value("ccotel_api_calls", "claude-opus-4-6") == len(expected) - 2
