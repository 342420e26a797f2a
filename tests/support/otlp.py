"""The one OTLP receiver of the tests and the benchmarks, on 127.0.0.1: traces or metrics, HTTP or gRPC.

The suite used to carry four (a minimal trace receiver, one answering as the test said, a metrics one
and the benchmark's counting one), each with its own server plumbing. What their users need differs
only in how the receiver answers and what it keeps, so those are the two knobs here:

- Answers: ``decide(request)``, the test's function, returns an :class:`HttpAnswer` or a
  :class:`GrpcAnswer` (``None``: 200 / OK, empty body). It is an attribute, so a test can change its
  mind mid-run (``rx.decide = refuse``, later ``rx.decide = accept``); :class:`Hold` is a backend that
  hangs. Only what was answered 2xx / OK counts as delivered.
- Keeping: decoding (the default) turns each delivered body into plain span dicts (``spans``) or
  :class:`Point` rows (``points``) with opentelemetry-proto, before answering, so an exporter told OK
  finds its spans here. Not decoding (the benchmarks) parses nothing: every span ccotel sends has one
  ``gen_ai.operation.name`` attribute, so spans are counted by that encoded key, after answering, so the
  measured process never waits on the receiver; ``save`` writes each body to a directory (decoded
  later), ``ids_prefix`` records when each id ``<prefix><letters>_<6 digits>`` arrived (time.time_ns),
  ``unique`` counts the distinct (trace id, span id) pairs and the spans that came again.

``GET /stats[?since=n]`` (HTTP) returns the counters and the arrivals after the n-th as JSON, and
``python -m tests.support.otlp [--port N] [--save DIR] [--ids-prefix P]`` runs a counting trace receiver
as its own process for bench/run.py, so it takes none of the measured process's CPU or GIL: its first
stdout line is ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import grpc
import orjson
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from typing_extensions import Self

__all__ = ["GrpcAnswer", "Hold", "HttpAnswer", "OtlpReceiver", "Point", "Request", "accept", "main",
           "partial_body", "refuse", "series_key", "status_body"]

Signal = Literal["traces", "metrics"]
Protocol = Literal["http/protobuf", "grpc"]

# KeyValue.key (field 1, length 21) = "gen_ai.operation.name": once per span ccotel exports
_SPAN_MARK = b"\x0a\x15gen_ai.operation.name"
# Span: trace_id (field 1, 16 bytes), span_id (2, 8 bytes), parent_span_id (4, 8 bytes) if any, then
# name (5). A Link starts with the same two fields but never goes on to a name, so it is not counted.
_SPAN_IDS = re.compile(rb"\x0a\x10(.{16}\x12\x08.{8})(?:\x22\x08.{8})?\x2a", re.DOTALL)
_GRPC_SERVICE = {"traces": "opentelemetry.proto.collector.trace.v1.TraceService",
                 "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService"}
_HOLD_LIMIT_S = 10.0  # a held request is answered after this at the latest: no test hangs on it


# -- answers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the receiver saw it."""

    n: int  # 1, 2, ... in arrival order
    at: float  # time.monotonic() on arrival
    span_ids: tuple[str, ...]  # decoded traces only
    size: int  # body bytes as sent


@dataclass(frozen=True)
class HttpAnswer:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/x-protobuf"


@dataclass(frozen=True)
class GrpcAnswer:
    code: grpc.StatusCode = grpc.StatusCode.OK
    message: str = ""
    retry_delay_s: float | None = None  # RetryInfo in grpc-status-details-bin
    body: bytes = b""  # the Export...ServiceResponse of an OK


Answer = HttpAnswer | GrpcAnswer
Decide = Callable[[Request], Answer | None]


def accept(_request: Request) -> None:
    """200 / OK, the default."""
    return None


def refuse(_request: Request) -> HttpAnswer:
    """503, a backend that is down (OTLP/HTTP)."""
    return HttpAnswer(503)


class Hold:
    """A ``decide`` that keeps each request waiting until :meth:`release` (10 s at most), then answers
    as ``then`` does: a backend that hangs. ``waiting`` counts the requests held now."""

    def __init__(self, then: Decide = accept) -> None:
        self.then = then
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._waiting

    def release(self) -> None:
        self._go.set()

    def __call__(self, request: Request) -> Answer | None:
        with self._lock:
            self._waiting += 1
        self._go.wait(_HOLD_LIMIT_S)
        with self._lock:
            self._waiting -= 1
        return self.then(request)


def status_body(code: int, message: str, retry_delay_s: float | None = None) -> bytes:
    """A google.rpc.Status, with a RetryInfo detail when a delay is given."""
    status = status_pb2.Status(code=code, message=message)
    if retry_delay_s is not None:
        info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
            seconds=int(retry_delay_s), nanos=round((retry_delay_s % 1) * 1e9)))
        detail = any_pb2.Any()
        detail.Pack(info)
        status.details.append(detail)
    return status.SerializeToString()


def partial_body(rejected: int, message: str) -> bytes:
    """An ExportTraceServiceResponse with partial_success."""
    resp = ExportTraceServiceResponse()
    resp.partial_success.rejected_spans = rejected
    resp.partial_success.error_message = message
    return resp.SerializeToString()


def _delivered(answer: Answer) -> bool:
    if isinstance(answer, HttpAnswer):
        return 200 <= answer.status < 300
    return answer.code == grpc.StatusCode.OK


# -- decoding --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One metric data point as received."""

    metric: str
    unit: str
    description: str
    kind: str  # "sum" | "histogram" | "gauge" | ...
    temporality: str  # "cumulative" | "delta" | ""
    monotonic: bool
    attributes: dict[str, Any]
    start_ns: int
    time_ns: int
    value: float  # a sum's or gauge's value; a histogram's sum
    count: int  # a histogram's count (0 otherwise)
    bounds: tuple[float, ...]
    bucket_counts: tuple[int, ...]
    resource: dict[str, Any]
    scope: str


SeriesKey = tuple[str, tuple[tuple[str, Any], ...]]


def series_key(p: Point) -> SeriesKey:
    return p.metric, tuple(sorted(p.attributes.items()))


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in kvs}


def _spans(req: ExportTraceServiceRequest, arrived_ns: int) -> list[dict[str, Any]]:
    out = []
    for rs in req.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex() or None, "name": s.name, "kind": s.kind,
                    "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                    "status": s.status.code, "status_message": s.status.message,
                    "attributes": _attributes(s.attributes),
                    "events": [e.name for e in s.events], "resource": resource, "arrived_ns": arrived_ns,
                })
    return out


_TEMPORALITY = {AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE: "cumulative",
                AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA: "delta"}


def _points(req: ExportMetricsServiceRequest) -> list[Point]:
    out: list[Point] = []
    for rm in req.resource_metrics:
        resource = _attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data") or ""
                if kind:
                    out.extend(_metric_points(m, kind, resource, sm.scope.name))
    return out


def _metric_points(m: Any, kind: str, resource: dict[str, Any], scope: str) -> list[Point]:
    data = getattr(m, kind)
    temporality = _TEMPORALITY.get(getattr(data, "aggregation_temporality", 0), "")
    hist = kind in ("histogram", "exponential_histogram")
    out = []
    for dp in data.data_points:
        if hist:
            value = dp.sum
        else:
            value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
        out.append(Point(
            metric=m.name, unit=m.unit, description=m.description, kind=kind, temporality=temporality,
            monotonic=bool(getattr(data, "is_monotonic", False)), attributes=_attributes(dp.attributes),
            start_ns=dp.start_time_unix_nano, time_ns=dp.time_unix_nano, value=float(value),
            count=int(dp.count) if hist else 0,
            bounds=tuple(dp.explicit_bounds) if kind == "histogram" else (),
            bucket_counts=tuple(int(c) for c in dp.bucket_counts) if kind == "histogram" else (),
            resource=resource, scope=scope,
        ))
    return out


# -- the receiver ----------------------------------------------------------------------------------


class OtlpReceiver:
    """Use as a context manager; ``endpoint`` is what OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT
    should say (HTTP: the full /v1/<signal> URL; gRPC: the address)."""

    def __init__(self, decide: Decide | None = None, *, signal: Signal = "traces",
                 protocol: Protocol = "http/protobuf", decode: bool = True, port: int = 0,
                 save: str | None = None, ids_prefix: str | None = None, unique: bool = False) -> None:
        self.decide: Decide = decide or accept
        self.signal = signal
        self.decode = decode
        self.save = save
        # ids end in <letters>_<6 digits>: a fixed end, whatever protobuf byte follows
        self._ids = re.compile(re.escape(ids_prefix.encode()) + rb"[a-z]+_[0-9]{6}") if ids_prefix else None
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._answers: list[tuple[Request, Answer]] = []
        self._spans: list[dict[str, Any]] = []
        self._points: list[Point] = []
        self._counts = {"bytes": 0, "spans": 0, "unique": 0, "again": 0}
        self._arrivals: list[tuple[str, int]] = []
        self._seen: set[bytes] | None = set() if unique else None
        self._http: ThreadingHTTPServer | None = None
        self._grpc: grpc.Server | None = None
        if protocol == "grpc":
            self._grpc = self._grpc_server(port)
        else:
            self._http = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
            self.port = self._http.server_address[1]
            self.endpoint = f"http://127.0.0.1:{self.port}/v1/{signal}"

    # -- what a test reads

    @property
    def requests(self) -> list[Request]:
        """Every request, however answered."""
        with self._lock:
            return list(self._requests)

    @property
    def answers(self) -> list[tuple[Request, Answer]]:
        with self._lock:
            return list(self._answers)

    @property
    def spans(self) -> list[dict[str, Any]]:
        """The decoded spans of requests answered 2xx / OK, in arrival order, repeats kept."""
        with self._lock:
            return list(self._spans)

    @property
    def delivered(self) -> list[str]:
        """The span ids of ``spans``."""
        return [s["span_id"] for s in self.spans]

    @property
    def points(self) -> list[Point]:
        """The decoded metric points of requests answered 2xx / OK."""
        with self._lock:
            return list(self._points)

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """``spans`` once there are ``count`` (or the timeout passed)."""
        _wait(lambda: len(self.spans) >= count, timeout_s)
        return self.spans

    def wait_requests(self, n: int, timeout_s: float = 10.0) -> int:
        """How many requests arrived, once there are ``n`` (or the timeout passed)."""
        _wait(lambda: len(self.requests) >= n, timeout_s)
        return len(self.requests)

    def latest(self) -> dict[SeriesKey, Point]:
        """The last point of each series (cumulative temporality: the running total)."""
        out: dict[SeriesKey, Point] = {}
        for p in self.points:
            key = series_key(p)
            if key not in out or p.time_ns >= out[key].time_ns:
                out[key] = p
        return out

    def summed(self) -> dict[SeriesKey, tuple[float, int]]:
        """(value, count) of each series added over every point (delta temporality)."""
        out: dict[SeriesKey, tuple[float, int]] = {}
        for p in self.points:
            value, count = out.get(series_key(p), (0.0, 0))
            out[series_key(p)] = (value + p.value, count + p.count)
        return out

    def stats(self, since: int = 0) -> dict[str, Any]:
        """The counters (``bytes``: request bodies, uncompressed) and the id arrivals after the ``since``-th."""
        with self._lock:
            return {"requests": len(self._requests), **self._counts, "arrivals_total": len(self._arrivals),
                    "arrivals": self._arrivals[since:]}

    # -- lifecycle

    def __enter__(self) -> Self:
        if self._grpc is not None:
            self._grpc.start()
        else:
            # a short poll: shutdown() waits for it, and tests start and stop many receivers
            threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def serve_forever(self, poll_s: float) -> None:
        """Serve HTTP on this thread (``__enter__`` does it on its own thread)."""
        assert self._http is not None, "gRPC serves on its own threads"
        self._http.serve_forever(poll_interval=poll_s)

    def __exit__(self, *exc: object) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
        else:
            assert self._http is not None
            self._http.shutdown()
            self._http.server_close()

    # -- one request

    def _take(self, body: bytes, size: int, default: Answer) -> tuple[Answer, Callable[[], None]]:
        """Log the request, ask ``decide``, keep what a 2xx / OK delivered; returns the answer and what
        is left to do once it has been sent."""
        arrived_ns = time.time_ns()
        message = self._parse(body) if self.decode else None
        ids = tuple(s.span_id.hex() for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans) \
            if isinstance(message, ExportTraceServiceRequest) else ()
        with self._lock:
            request = Request(len(self._requests) + 1, time.monotonic(), ids, size)
            self._requests.append(request)
            self._counts["bytes"] += len(body)
        answer = self.decide(request) or default
        delivered = _delivered(answer)
        with self._lock:
            self._answers.append((request, answer))
        if delivered and message is not None:
            self._keep(message, arrived_ns)
        return answer, (lambda: self._tally(request, body, arrived_ns)) if delivered else _nothing

    def _parse(self, body: bytes) -> ExportTraceServiceRequest | ExportMetricsServiceRequest:
        message = ExportTraceServiceRequest() if self.signal == "traces" else ExportMetricsServiceRequest()
        message.ParseFromString(body)
        return message

    def _keep(self, message: ExportTraceServiceRequest | ExportMetricsServiceRequest, arrived_ns: int) -> None:
        if isinstance(message, ExportTraceServiceRequest):
            spans = _spans(message, arrived_ns)
            with self._lock:
                self._spans.extend(spans)
                self._counts["spans"] += len(spans)
        else:
            points = _points(message)
            with self._lock:
                self._points.extend(points)

    def _tally(self, request: Request, body: bytes, arrived_ns: int) -> None:
        """What the benchmarks keep of a delivered body, once it has been answered."""
        if self.save:
            with open(os.path.join(self.save, f"{request.n - 1:06d}.pb"), "wb") as f:
                f.write(body)
        spans = 0 if self.decode else body.count(_SPAN_MARK)
        found = [(m.decode(), arrived_ns) for m in dict.fromkeys(self._ids.findall(body))] if self._ids else []
        ids = _SPAN_IDS.findall(body) if self._seen is not None else []
        with self._lock:
            self._counts["spans"] += spans
            self._arrivals.extend(found)
            if self._seen is not None:
                before = len(self._seen)
                self._seen.update(ids)
                self._counts["unique"] = len(self._seen)
                self._counts["again"] += len(ids) - (len(self._seen) - before)

    def _grpc_server(self, port: int) -> grpc.Server:
        def export(body: bytes, context: grpc.ServicerContext) -> bytes:
            answer, after = self._take(body, len(body), GrpcAnswer())
            assert isinstance(answer, GrpcAnswer), f"a gRPC receiver answered {answer}"
            after()
            if answer.code != grpc.StatusCode.OK:
                context.set_trailing_metadata((("grpc-status-details-bin", status_body(
                    answer.code.value[0], answer.message, answer.retry_delay_s)),))
                context.abort(answer.code, answer.message)
            return answer.body

        handler = grpc.method_handlers_generic_handler(
            _GRPC_SERVICE[self.signal], {"Export": grpc.unary_unary_rpc_method_handler(export)})
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        return server


def _nothing() -> None:
    pass


def _wait(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def _handler(rx: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    path = f"/v1/{rx.signal}"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector does

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if urlsplit(self.path).path != path:  # as a collector: only its own path
                self._send(HttpAnswer(404, b"not found", content_type="text/plain"))
                return
            body = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
            answer, after = rx._take(body, len(raw), HttpAnswer())
            assert isinstance(answer, HttpAnswer), f"an HTTP receiver answered {answer}"
            self._send(answer)
            after()

        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            if url.path != "/stats":
                self._send(HttpAnswer(404, b"not found", content_type="text/plain"))
                return
            since = int((parse_qs(url.query).get("since") or ["0"])[0] or 0)
            self._send(HttpAnswer(body=orjson.dumps(rx.stats(since)), content_type="application/json"))

        def _send(self, answer: HttpAnswer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            for k, v in answer.headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


# -- as its own process ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.otlp",
                                 description="A counting OTLP/HTTP trace receiver (first line: PORT <n>).")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--save", default=None, help="write every request body to this dir")
    ap.add_argument("--ids-prefix", default=None, help="record the arrival time of every id with this prefix")
    ap.add_argument("--unique", action="store_true", help="count distinct span ids and the spans that came again")
    args = ap.parse_args(argv)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    rx = OtlpReceiver(decode=False, port=args.port, save=args.save, ids_prefix=args.ids_prefix,
                      unique=args.unique)
    sys.stdout.write(f"PORT {rx.port}\n")
    sys.stdout.flush()
    try:
        rx.serve_forever(0.5)  # stopped by a signal: nothing waits on the poll
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
