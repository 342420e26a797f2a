"""records.BadInput, the one list of ccotel_parse_errors_total's reasons: a member is its string
wherever reasons go (a Counter key beside the same reason as a plain string, a label value, a log
word, JSON, SQLite, a worker's pickled stats), so counting by member changed no output."""

from __future__ import annotations

import pickle
import sqlite3
from collections import Counter

import orjson
from prometheus_client.exposition import generate_latest

from ccotel.metrics import events
from ccotel.metrics.counters import Metrics, registry_for
from ccotel.records import BadInput


def test_a_member_is_its_string_everywhere() -> None:
    for reason in BadInput:
        value = reason.value
        assert str(reason) == f"{reason}" == "%s" % reason == value  # noqa: UP031 (as logging formats it)
        assert hash(reason) == hash(value) and reason == value
        counts: Counter[str] = Counter({value: 1})
        counts[reason] += 1
        assert counts == {value: 2} and len(counts) == 1
        assert orjson.loads(orjson.dumps([reason])) == [value]
        assert sqlite3.connect(":memory:").execute("SELECT ?", (reason,)).fetchone() == (value,)
        assert pickle.loads(pickle.dumps(reason)) is reason


def test_counted_by_member_the_series_is_the_string_s() -> None:
    metrics = Metrics()
    events.parse_error(metrics, BadInput.BAD_FIELD)
    metrics.inc("ccotel_parse_errors", "bad_field")  # as a restored total names it
    assert metrics.value("ccotel_parse_errors", "bad_field") == 2
    assert 'ccotel_parse_errors_total{reason="bad_field"} 2.0' in generate_latest(registry_for(metrics)).decode()
    again = Metrics()  # the totals a state keeps and a restart restores
    again.restore(metrics.snapshot())
    events.parse_error(again, BadInput.BAD_FIELD)
    assert again.value("ccotel_parse_errors", "bad_field") == 3


def test_the_docs_list_every_reason() -> None:
    from docs.generate import bad_input_reasons

    text = bad_input_reasons()
    assert all(f"`{r.value}`" in text for r in BadInput)
