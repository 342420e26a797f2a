"""Export results as the OTLP specification defines them: what the backend answers decides
whether a batch is delivered, retried, split or dropped, and one batch it will never take
does not stop the rest.

Real loopback receivers (tests/support/otlp.py, HTTP and gRPC on 127.0.0.1) answer
400, 413, 429 with Retry-After, 503, partial_success, and gRPC codes with RetryInfo; the
in-memory sink shipped with ccotel (ccotel.memory_sink) drives the queue and the checkpoints.
Every wait is bounded.
"""

from __future__ import annotations

import email.utils
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc

from ccotel.export.otlp import decode_partial_success, decode_status
from ccotel.export.result import OK, ExportResult, Outcome
from ccotel.export.sinks import ExportQueue, MemorySink, OtlpSink
from ccotel.export.transport import (
    HttpTransport,
    TransportConfig,
    classify_grpc,
    classify_http,
    parse_retry_after,
)
from ccotel.metrics.counters import Metrics
from ccotel.records import SpanKind, SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.support.otlp import GrpcAnswer, HttpAnswer, OtlpReceiver, Request, partial_body, status_body
from tests.transcript import Transcript

INVALID_ARGUMENT = 3


def corpus(root: Path, sessions: int, turns: int = 6) -> None:
    for i in range(sessions):
        sid = f"{i:08x}-5555-4bbb-8ccc-dddddddddddd"
        t = Transcript(sid, t_ms=1_760_000_000_000 + i * 10_000_000)
        for j in range(turns):
            t.tool_turn(f"e{i}_{j}")
        t.write(str(root / "projects" / f"-p{i % 3}" / f"{sid}.jsonl"))


def single_pass(root: Path) -> list[str]:
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(str(root),)), emit=out.extend).backfill(close_all=True)
    return [f"{s.span_id:016x}" for s in out]


def otlp_env(endpoint: str, protocol: str = "http/protobuf") -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_TIMEOUT": "5000"}


def spans(n: int, first: int = 1) -> list[SpanRecord]:
    return [SpanRecord(trace_id=7, span_id=first + i, parent_span_id=None, name=f"s{i}", kind=SpanKind.INTERNAL,
                       start_ns=1_700_000_000_000_000_000, end_ns=1_700_000_000_100_000_000, attributes={"i": i})
            for i in range(n)]


def hex_ids(records: list[SpanRecord]) -> list[str]:
    return [f"{s.span_id:016x}" for s in records]


def backfill_in_time(pipeline: Pipeline, timeout_s: float) -> bool:
    """Backfill on another thread; False if it was still blocked (ccotel stopped reading)."""
    t = threading.Thread(target=pipeline.backfill, kwargs={"close_all": True}, daemon=True)
    t.start()
    t.join(timeout_s)
    return not t.is_alive()


# -- a rejected batch does not stop tracing ----------------------------------------------------


def test_http_400_and_413_drop_only_what_the_backend_refused(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    corpus(root, sessions=60)
    want = single_pass(root)
    assert len(want) > 1000 and len(set(want)) == len(want)
    poison, huge = want[len(want) // 3], want[2 * len(want) // 3]

    def decide(req: Request) -> HttpAnswer | None:
        if len(req.span_ids) > 64:  # a collector with a body-size limit, which says so in text
            return HttpAnswer(413, b"request body too large", content_type="text/plain")
        if huge in req.span_ids:  # one span alone is larger than the limit
            return HttpAnswer(413, status_body(INVALID_ARGUMENT, "span exceeds 4 MiB"))
        if poison in req.span_ids:
            return HttpAnswer(400, status_body(INVALID_ARGUMENT, "invalid span: poison attribute"))
        return None

    notes: list[str] = []
    metrics = Metrics()
    with OtlpReceiver(decide) as rx:
        queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), max_pending=300, notify=notes.append)
        pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=State(str(tmp_path / "st")),
                            metrics=metrics)
        queue.on_ack = pipeline.acknowledge
        read_everything = backfill_in_time(pipeline, 60)
        flushed = queue.flush(30)
        queue.close(timeout_s=1)
        assert read_everything, "ccotel stopped reading: the rejected batch blocked the queue"
        assert flushed
        pipeline.process_acks()

        rejected = [req for req, answer in rx.answers if answer.status == 400]
        assert len(rejected) == 1, "the rejected batch was sent again"
        bad = set(rejected[0].span_ids)
        assert poison in bad and huge not in bad
        delivered = rx.delivered
        assert [i for i, n in Counter(delivered).items() if n > 1] == []  # each delivered once
        assert set(delivered) == set(want) - bad - {huge}  # and nothing else is missing
        assert [req.span_ids for req, a in rx.answers if a.status == 413 and len(req.span_ids) == 1] == [(huge,)]

        assert metrics.value("ccotel_spans_exported") == len(delivered)
        assert metrics.value("ccotel_spans_dropped", "bad_request") == len(bad)
        assert metrics.value("ccotel_spans_dropped", "too_large") == 1
        assert queue.exported == len(delivered)
        assert queue.dropped == Counter({"bad_request": len(bad), "too_large": 1})

        # the log: what the backend said, once per reason; never "not reachable"
        said_400 = [n for n in notes if "HTTP 400" in n]
        assert len(said_400) == 1 and "invalid span: poison attribute" in said_400[0], notes
        assert len([n for n in notes if "span exceeds 4 MiB" in n]) == 1, notes
        assert len([n for n in notes if "request body too large" in n]) == 1, notes
        assert not [n for n in notes if "not reachable" in n], notes

        # the checkpoints moved past the dropped spans: a restart reads and sends nothing again
        sent = len(rx.requests)
        again = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), notify=notes.append)
        restarted = Pipeline(Options(roots=(str(root),)), emit=again.submit, state=State(str(tmp_path / "st")),
                             metrics=Metrics())
        again.on_ack = restarted.acknowledge
        assert backfill_in_time(restarted, 30)
        assert again.flush(10)
        again.close(timeout_s=1)
        assert restarted.stats.spans == 0
        assert len(rx.requests) == sent


def test_partial_success_counts_the_rejected_spans(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    corpus(root, sessions=3, turns=2)
    want = single_pass(root)

    def decide(req: Request) -> HttpAnswer | None:
        if req.n == 1:
            return HttpAnswer(200, partial_body(3, "3 spans had an invalid trace id"))
        return None

    notes: list[str] = []
    metrics = Metrics()
    with OtlpReceiver(decide) as rx:
        queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), notify=notes.append)
        pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, metrics=metrics)
        queue.on_ack = pipeline.acknowledge
        assert backfill_in_time(pipeline, 30)
        assert queue.flush(10)
        queue.close(timeout_s=1)
    assert len(rx.delivered) == len(want)  # the receiver kept them all; its answer says it did not
    assert metrics.value("ccotel_spans_exported") == len(want) - 3
    assert metrics.value("ccotel_spans_dropped", "partial_success") == 3
    told = [n for n in notes if "3 spans had an invalid trace id" in n]
    assert len(told) == 1 and "rejected 3" in told[0], notes


# -- retryable answers -------------------------------------------------------------------------


def test_429_waits_as_long_as_retry_after_says() -> None:
    """Retry-After in seconds, then as an HTTP date (made when answering: whole seconds, so
    2.2 s ahead is at least 1.2 s)."""
    for retry_after, at_least in ((lambda: "1", 0.95),
                                  (lambda: email.utils.formatdate(time.time() + 2.2, usegmt=True), 1.15)):
        notes: list[str] = []

        def decide(req: Request, value: Callable[[], str] = retry_after) -> HttpAnswer | None:
            if req.n == 1:
                return HttpAnswer(429, b"slow down", headers=(("Retry-After", value()),), content_type="text/plain")
            return None

        with OtlpReceiver(decide) as rx:
            queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), notify=notes.append, min_backoff_s=0.01)
            queue.submit(spans(20))
            assert queue.flush(10)
            queue.close(timeout_s=1)
            first, second = rx.requests[:2]
        waited = second.at - first.at
        assert at_least <= waited < 4, (retry_after, waited)  # not the 0.01 s backoff
        assert sorted(rx.delivered) == sorted(hex_ids(spans(20)))
        assert len(rx.requests) == 2
        assert any("HTTP 429" in n and "slow down" in n for n in notes), notes
        assert not [n for n in notes if "not reachable" in n], notes


def test_503_then_ok_delivers_everything_once() -> None:
    notes: list[str] = []

    def decide(req: Request) -> HttpAnswer | None:
        return HttpAnswer(503, b"collector overloaded", content_type="text/plain") if req.n <= 3 else None

    with OtlpReceiver(decide) as rx:
        queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), notify=notes.append, min_backoff_s=0.05,
                            batch_size=50)
        queue.submit(spans(120))
        assert queue.flush(15)
        queue.close(timeout_s=1)
    assert Counter(rx.delivered) == Counter(hex_ids(spans(120)))
    assert queue.exported == 120 and not queue.dropped and queue.failures == 3
    down = [n for n in notes if "not reachable" in n]
    assert len(down) == 1 and "HTTP 503" in down[0] and "collector overloaded" in down[0], notes
    assert len([n for n in notes if "answers again" in n]) == 1, notes


def test_connection_refused_is_not_reachable_and_kept() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    notes: list[str] = []
    queue = ExportQueue(OtlpSink(otlp_env(f"http://127.0.0.1:{port}/v1/traces")), notify=notes.append,
                        min_backoff_s=0.05)
    queue.submit(spans(5))
    deadline = time.monotonic() + 10
    while queue.failures < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queue.close(timeout_s=0.2) is False  # still held, not dropped
    assert queue.failures >= 2 and queue.exported == 0 and not queue.dropped
    assert len(notes) == 1 and "not reachable" in notes[0] and "refused" in notes[0].lower(), notes


# -- gRPC --------------------------------------------------------------------------------------


def test_grpc_status_codes_retry_info_and_partial_success() -> None:
    too_large = "grpc: received message larger than max (5000 vs. 4000)"

    def decide(req: Request) -> GrpcAnswer | None:
        scripted = {
            1: GrpcAnswer(grpc.StatusCode.UNAVAILABLE, "collector starting"),
            2: GrpcAnswer(grpc.StatusCode.RESOURCE_EXHAUSTED, "memory limit", retry_delay_s=0.6),
            3: GrpcAnswer(body=partial_body(2, "2 spans rejected: bad ids")),
            4: GrpcAnswer(grpc.StatusCode.INVALID_ARGUMENT, "invalid span"),
        }
        if req.n in scripted:
            return scripted[req.n]
        if len(req.span_ids) > 2:
            return GrpcAnswer(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large)
        return None

    notes: list[str] = []
    acks: list[tuple[int, ExportResult]] = []
    with OtlpReceiver(decide, protocol="grpc") as rx:
        queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint, "grpc")), notify=notes.append, min_backoff_s=0.05,
                            on_ack=lambda batch, result: acks.append((len(batch), result)))
        for batch in (spans(10, 1), spans(5, 100), spans(2, 200), spans(4, 300)):
            queue.submit(batch)
            assert queue.flush(15)
        queue.close(timeout_s=1)
        reqs = rx.requests
    assert reqs[2].at - reqs[1].at >= 0.55  # RetryInfo's delay, not the 0.05 s backoff
    assert [len(r.span_ids) for r in reqs] == [10, 10, 10, 5, 2, 4, 2, 2]
    assert queue.exported == 8 + 2 + 4
    assert queue.dropped == Counter({"partial_success": 2, "bad_request": 5})
    assert [(n, r.outcome, r.drops) for n, r in acks] == [
        (10, Outcome.OK, (("partial_success", 2),)), (5, Outcome.DROP, (("bad_request", 5),)),
        (2, Outcome.OK, ()), (2, Outcome.OK, ()), (2, Outcome.OK, ())]
    assert len([n for n in notes if "not reachable" in n and "gRPC UNAVAILABLE: collector starting" in n]) == 1
    assert len([n for n in notes if "gRPC INVALID_ARGUMENT: invalid span" in n]) == 1, notes
    assert len([n for n in notes if "2 spans rejected: bad ids" in n]) == 1, notes
    assert len([n for n in notes if "larger than max" in n]) == 1, notes


# -- what cannot be encoded, and the in-memory sink --------------------------------------------


def test_unencodable_spans_are_dropped_and_counted_not_claimed_delivered() -> None:
    bad = SpanRecord(trace_id=1 << 130, span_id=99, parent_span_id=None, name="bad", kind=SpanKind.INTERNAL,
                     start_ns=1, end_ns=2, attributes={})
    notes: list[str] = []
    acks: list[tuple[int, ExportResult]] = []
    with OtlpReceiver() as rx:
        queue = ExportQueue(OtlpSink(otlp_env(rx.endpoint)), notify=notes.append,
                            on_ack=lambda batch, result: acks.append((len(batch), result)))
        queue.submit([*spans(5), bad])
        assert queue.flush(10)
        queue.submit([bad])
        assert queue.flush(10)
        queue.close(timeout_s=1)
    assert sorted(rx.delivered) == sorted(hex_ids(spans(5)))
    assert len(rx.requests) == 1  # a batch of only unencodable spans is not sent at all
    assert queue.exported == 5 and queue.dropped == Counter({"unencodable": 2})
    assert [(n, r.outcome, r.drops) for n, r in acks] == [(6, Outcome.OK, (("unencodable", 1),)),
                                                          (1, Outcome.DROP, (("unencodable", 1),))]
    assert len([n for n in notes if "cannot be encoded" in n]) == 1, notes


def test_memory_sink_drop_moves_the_checkpoint_and_counts_apart(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    corpus(root, sessions=4, turns=3)
    want = single_pass(root)
    sink = MemorySink()
    sink.drop(reason="bad_request", message="HTTP 400 Bad Request: no")
    metrics = Metrics()
    queue = ExportQueue(sink, batch_size=10, notify=lambda _m: None)
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=State(str(tmp_path / "st")),
                        metrics=metrics)
    queue.on_ack = pipeline.acknowledge
    pipeline.backfill(close_all=True)
    assert queue.flush(10)
    queue.close(timeout_s=1)
    pipeline.process_acks()
    assert len(sink.dropped) == 10 and len(sink.spans) == len(want) - 10
    assert metrics.value("ccotel_spans_exported") == len(want) - 10
    assert metrics.value("ccotel_spans_dropped", "bad_request") == 10
    # a restart: nothing is read or sent again, and the counters come back from the state
    sink2, m2 = MemorySink(), Metrics()
    again = ExportQueue(sink2)
    restarted = Pipeline(Options(roots=(str(root),)), emit=again.submit, state=State(str(tmp_path / "st")),
                         metrics=m2)
    again.on_ack = restarted.acknowledge
    restarted.backfill(close_all=True)
    again.close(timeout_s=5)
    assert sink2.batches == []
    assert m2.value("ccotel_spans_exported") == len(want) - 10
    assert m2.value("ccotel_spans_dropped", "bad_request") == 10


def test_memory_sink_too_large_splits_down_to_the_one_span() -> None:
    big = spans(40)[17]
    sink = MemorySink(max_batch=8, reject_if=lambda b: ExportResult.drop(len(b), "too_large", "HTTP 413")
                      if big in b else None)
    sink.retry(times=2, retry_after=0.05)
    queue = ExportQueue(sink, batch_size=32, notify=lambda _m: None, min_backoff_s=0.01)
    queue.submit(spans(40))
    assert queue.flush(10)
    queue.close(timeout_s=1)
    final = [(n, r.outcome) for n, r in zip(sink.batches, sink.results, strict=False)
             if n == 1 and r.outcome is not Outcome.OK]
    assert final == [(1, Outcome.DROP)]  # the span alone, once: not retried
    assert sorted(s.span_id for s in sink.spans) == sorted(s.span_id for s in spans(40) if s.span_id != big.span_id)
    assert queue.dropped == Counter({"too_large": 1}) and queue.exported == 39
    assert max(n for n, r in zip(sink.batches, sink.results, strict=False) if r.outcome is Outcome.OK) <= 8


def test_a_sink_that_raises_is_retried_not_fatal() -> None:
    calls = []

    class Flaky(MemorySink):
        def export(self, batch):  # type: ignore[no-untyped-def]
            calls.append(len(batch))
            if len(calls) == 1:
                raise RuntimeError("boom")
            return super().export(batch)

    sink = Flaky()
    queue = ExportQueue(sink, notify=lambda _m: None, min_backoff_s=0.01)
    queue.submit(spans(3))
    assert queue.flush(5)
    queue.close(timeout_s=1)
    assert calls == [3, 3] and len(sink.spans) == 3 and queue.failures == 1


# -- the answers, one by one -------------------------------------------------------------------


def test_classify_http_answers() -> None:
    proto = {"Content-Type": "application/x-protobuf"}
    assert classify_http(200, "OK", proto, b"", 5) is OK
    r = classify_http(200, "OK", proto, partial_body(9, "too many"), 5)
    assert (r.outcome, r.drops) == (Outcome.OK, (("partial_success", 5),))  # never more than was sent
    r = classify_http(200, "OK", {"Content-Type": "application/json"},
                      b'{"partialSuccess": {"rejectedSpans": "2", "errorMessage": "x"}}', 5)
    assert r.drops == (("partial_success", 2),)
    r = classify_http(200, "OK", proto, partial_body(0, "deprecated attribute"), 5)  # a warning only
    assert r.outcome is Outcome.OK and r.drops == () and "deprecated attribute" in r.message
    r = classify_http(400, "Bad Request", proto, status_body(3, "bad\nthing"), 5)
    assert (r.outcome, r.drops, r.message) == (Outcome.DROP, (("bad_request", 5),), "HTTP 400 Bad Request: bad thing")
    r = classify_http(400, "Bad Request", {"Content-Type": "application/json"}, b'{"code": 3, "message": "j"}', 5)
    assert r.message == "HTTP 400 Bad Request: j"
    assert classify_http(401, "Unauthorized", {}, b"", 5).drops == (("http_401", 5),)
    assert classify_http(413, "Too Large", {}, b"", 5).reason == "too_large"
    for status in (429, 502, 503, 504):
        assert classify_http(status, "", {}, b"", 5).outcome is Outcome.RETRY
    r = classify_http(503, "", {"retry-after": "7"}, b"", 5)
    assert r.retry_after == 7 and r.reason == "unavailable"
    r = classify_http(429, "", proto, status_body(8, "quota", retry_delay_s=1.5), 5)  # RetryInfo in the body
    assert (r.reason, r.retry_after) == ("throttled", 1.5)
    assert classify_http(500, "", {}, b"oops", 5).outcome is Outcome.DROP  # not retryable in OTLP
    r = classify_http(308, "Permanent Redirect", {"Location": "https://c:4318/v1/traces"}, b"", 5)
    assert r.outcome is Outcome.RETRY and "https://c:4318/v1/traces" in r.message  # held, not dropped


def test_parse_retry_after() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0
    for junk in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(junk, now) is None


def test_classify_grpc_answers() -> None:
    delay = {"grpc-status-details-bin": status_body(8, "slow", retry_delay_s=2)}
    assert classify_grpc("UNAVAILABLE", "x", {}, 4).reason == "unavailable"
    assert classify_grpc("DEADLINE_EXCEEDED", "x", {}, 4).reason == "timeout"
    assert classify_grpc("RESOURCE_EXHAUSTED", "slow", delay, 4).retry_after == 2
    assert classify_grpc("RESOURCE_EXHAUSTED", "quota", {}, 4).outcome is Outcome.DROP  # no RetryInfo
    assert classify_grpc("RESOURCE_EXHAUSTED", "message larger than max", {}, 4).reason == "too_large"
    assert classify_grpc("INVALID_ARGUMENT", "x", {}, 4).drops == (("bad_request", 4),)
    assert classify_grpc("PERMISSION_DENIED", "x", {}, 4).drops == (("grpc_permission_denied", 4),)


def test_decoders_refuse_garbage() -> None:
    assert decode_partial_success(partial_body(3, "m")) == (3, "m")
    assert decode_status(status_body(3, "m", 0.25)).retry_delay_s == 0.25
    for junk in (b"\xff", b"<html>", b"\x0a\x05ab", b"\x08\x0a\x03abc"[:3] + b"\x12"):
        try:
            decode_status(junk)
        except ValueError:
            continue
        raise AssertionError(junk)


def test_a_413_answered_before_the_body_was_read_is_still_heard() -> None:
    """A backend with a body-size limit may answer 413 and close without reading the rest."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            body = b"body exceeds 1 MiB"
            conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.3)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        r = HttpTransport(TransportConfig(f"http://127.0.0.1:{port}/v1/traces", timeout_s=5)).send(b"x" * (16 << 20), 3)
    finally:
        t.join(5)
        srv.close()
    assert (r.outcome, r.reason, r.message) == (Outcome.DROP, "too_large",
                                                "HTTP 413 Payload Too Large: body exceeds 1 MiB")

