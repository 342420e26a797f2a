"""The fast constructors of the span and parse stages give exactly what the dataclasses give.

spans.py builds SpanRecords, and parse.py fills an Entry's __dict__ in place, without the
frozen dataclass __init__ (records.fast_constructor). Checked on every span and entry of the
fixtures: equal to the dataclass built from the same fields, with the same __dict__ (keys in
the fields' order); and parse.py's fallback for a class that cannot take the shortcut gives the
same entries.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys

import pytest

from ccotel.read import parse_fast
from ccotel.records import Entry, SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans import build as spans

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")


def _fields(obj: object) -> list[str]:
    return [f.name for f in dataclasses.fields(obj)]  # type: ignore[arg-type]


def _lines() -> list[bytes]:
    out = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "**", "*.jsonl"), recursive=True)):
        with open(path, "rb") as f:
            out += [line for line in f.read().split(b"\n") if line.strip()]
    return out


def _roots() -> list[str]:
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(FIXTURES, "**", "projects"), recursive=True))


def test_span_records_equal_the_dataclass() -> None:
    assert spans._new_span.__name__ == "make_held"  # records.py changes that make it unsafe turn it off
    roots = _roots()
    assert roots
    seen = 0
    for root in roots:
        out: list[SpanRecord] = []
        Pipeline(Options(roots=(root,)), emit=out.extend).backfill(close_all=True)
        for s in out:
            plain = SpanRecord(**vars(s))
            assert type(s) is SpanRecord and s == plain and vars(s) == vars(plain)
            assert list(vars(s)) == _fields(s)
            seen += 1
    assert seen > 50


@pytest.mark.parametrize("capture", [False, True])
def test_entries_in_place_equal_the_dataclass_and_the_fallback(capture: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_fast._ENTRY_IN_PLACE
    lines = _lines()
    fast = [parse_fast.fast_entry(line, 5, capture) for line in lines]
    assert sum(e is not None for e in fast) > 100
    for e in fast:
        if e is not None:
            plain = Entry(**vars(e))
            assert type(e) is Entry and e == plain and vars(e) == vars(plain) and list(vars(e)) == _fields(e)
    monkeypatch.setattr(parse_fast, "_ENTRY_IN_PLACE", False)  # a class the shortcut cannot take: Entry(**kw)
    fallback = [parse_fast.fast_entry(line, 5, capture) for line in lines]
    assert fallback == fast
    assert [vars(e) if e else None for e in fallback] == [vars(e) if e else None for e in fast]


def test_fast_records_take_no_more_memory_than_the_dataclass() -> None:
    """A span waits for its session's last one and then for the exporter; a call's usage is held
    with the call: their ``__dict__`` must be the compact one the dataclass's own ``__init__`` makes
    (a dict sharing the class's keys), not a copy of the defaults' whole table (464 bytes against 160
    for a span)."""
    from ccotel.read.parse_full import _new_usage
    from ccotel.records import SpanKind, Usage

    kw = {"trace_id": 1, "span_id": 2, "parent_span_id": None, "name": "n", "kind": SpanKind.INTERNAL,
          "start_ns": 1, "end_ns": 2, "attributes": {}}
    plain, fast = SpanRecord(**kw), spans._new_span(dict(kw))
    assert fast == plain and list(vars(fast)) == _fields(fast)
    assert sys.getsizeof(vars(fast)) <= sys.getsizeof(vars(plain))
    counts = {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3}
    usage = _new_usage(dict(counts))
    assert usage == Usage(**counts) and sys.getsizeof(vars(usage)) <= sys.getsizeof(vars(Usage(**counts)))
