"""The counting receiver's span identity (bench row 6 at 4 GB counts every span once with it): a span
sent twice is counted again, a root and a child both count, bodies are never decoded."""

from __future__ import annotations

import time
import urllib.request

from ccotel.export.otlp import encode_request
from ccotel.records import SpanKind, SpanRecord
from tests.support.otlp import OtlpReceiver


def _span(span_id: int, parent: int = 0, trace_id: int = 7) -> SpanRecord:
    return SpanRecord(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=f"chat {span_id}",
                      kind=SpanKind.CLIENT, start_ns=1, end_ns=2,
                      attributes={"gen_ai.operation.name": "chat", "x": "\x0a\x10" + "y" * 30})


def _post(endpoint: str, body: bytes) -> None:
    req = urllib.request.Request(endpoint, data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as answer:
        answer.read()


def test_spans_sent_again_are_counted_apart_from_the_distinct_ones() -> None:
    first = encode_request([_span(1), _span(2, parent=1), _span(3, parent=1)], {"service.name": "t"}, "s", "1")
    again = encode_request([_span(2, parent=1), _span(4, parent=1), _span(1, trace_id=8)], {"service.name": "t"},
                           "s", "1")
    with OtlpReceiver(decode=False, unique=True) as rx:
        _post(rx.endpoint, first)
        _post(rx.endpoint, again)
        rx.wait_requests(2)
        for _ in range(100):  # counted just after the answer
            st = rx.stats()
            if st["spans"] == 6:
                break
            time.sleep(0.02)
    assert (st["spans"], st["unique"], st["again"]) == (6, 5, 1)


def test_without_unique_nothing_is_tracked() -> None:
    with OtlpReceiver(decode=False) as rx:
        _post(rx.endpoint, encode_request([_span(1), _span(1)], {}, "s", "1"))
        rx.wait_requests(1)
        assert rx.stats()["again"] == 0
