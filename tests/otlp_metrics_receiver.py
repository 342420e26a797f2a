"""A minimal OTLP metrics receiver on 127.0.0.1 for tests: HTTP (POST /v1/metrics) or gRPC
(MetricsService/Export).

Each ExportMetricsServiceRequest (protobuf, gzip or not) is decoded with opentelemetry-proto
into plain ``Point`` rows, one per data point, with the resource and scope they came with.
``latest`` folds the rows into the last cumulative value of each series; ``summed`` adds
delta points. Nothing here knows what ccotel sends: tests compare the rows with their own
expectations.
"""

from __future__ import annotations

import gzip
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

__all__ = ["MetricsReceiver", "Point", "series_key"]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class Point:
    """One data point as received."""

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


def series_key(p: Point) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return p.metric, tuple(sorted(p.attributes.items()))


def decode(body: bytes) -> list[Point]:
    req = ExportMetricsServiceRequest()
    req.ParseFromString(body)
    out: list[Point] = []
    for rm in req.resource_metrics:
        resource = {a.key: _value(a.value) for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data") or ""
                data = getattr(m, kind) if kind else None
                if data is None:
                    continue
                temporality = getattr(data, "aggregation_temporality", 0)
                temp = {AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE: "cumulative",
                        AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA: "delta"}.get(temporality, "")
                for dp in data.data_points:
                    hist = kind in ("histogram", "exponential_histogram")
                    if hist:
                        value = dp.sum
                    else:
                        value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                    out.append(Point(
                        metric=m.name, unit=m.unit, description=m.description, kind=kind, temporality=temp,
                        monotonic=bool(getattr(data, "is_monotonic", False)),
                        attributes={a.key: _value(a.value) for a in dp.attributes},
                        start_ns=dp.start_time_unix_nano, time_ns=dp.time_unix_nano, value=float(value),
                        count=int(dp.count) if hist else 0,
                        bounds=tuple(dp.explicit_bounds) if kind == "histogram" else (),
                        bucket_counts=tuple(int(c) for c in dp.bucket_counts) if kind == "histogram" else (),
                        resource=resource, scope=sm.scope.name,
                    ))
    return out


class MetricsReceiver:
    """``protocol``: "http/protobuf" or "grpc". Use as a context manager; ``endpoint`` is what
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT should say."""

    def __init__(self, protocol: str = "http/protobuf") -> None:
        self.protocol = protocol
        self.points: list[Point] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        if protocol == "grpc":
            self._start_grpc()
        else:
            self._start_http()

    def _take(self, body: bytes) -> None:
        points = decode(body)
        with self._lock:
            self.requests += 1
            self.points.extend(points)

    def _start_http(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/metrics":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._http.server_address[1]}/v1/metrics"
        # a short poll: shutdown() waits for it, and tests start and stop many receivers
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def _start_grpc(self) -> None:
        import grpc

        receiver = self

        class Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
                receiver._take(request.SerializeToString())
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Servicer(), self._grpc)
        port = self._grpc.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def __enter__(self) -> MetricsReceiver:
        if self._http is not None:
            self._thread.start()
        else:
            self._grpc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        else:
            self._grpc.stop(grace=None)

    def snapshot(self) -> list[Point]:
        with self._lock:
            return list(self.points)

    def wait_for(self, metric: str, timeout_s: float = 10.0) -> list[Point]:
        """Every point received once one of ``metric`` has arrived (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            points = self.snapshot()
            if any(p.metric == metric for p in points):
                return points
            time.sleep(0.02)
        return self.snapshot()

    def wait_requests(self, n: int, timeout_s: float = 10.0) -> int:
        """Requests received once there are ``n`` (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self.requests >= n:
                    return self.requests
            time.sleep(0.02)
        with self._lock:
            return self.requests

    def latest(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Point]:
        """The last point of each series (cumulative temporality: the running total)."""
        out: dict[tuple[str, tuple[tuple[str, Any], ...]], Point] = {}
        for p in self.snapshot():
            key = series_key(p)
            if key not in out or p.time_ns >= out[key].time_ns:
                out[key] = p
        return out

    def summed(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[float, int]]:
        """(value, count) of each series added over every point (delta temporality)."""
        out: dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[float, int]] = {}
        for p in self.snapshot():
            value, count = out.get(series_key(p), (0.0, 0))
            out[series_key(p)] = (value + p.value, count + p.count)
        return out
