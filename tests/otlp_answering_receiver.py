"""OTLP trace receivers on 127.0.0.1 that answer as a test tells them: HTTP and gRPC.

Like tests/otlp_receiver.py they decode each request with opentelemetry-proto, but a test
function chooses every answer: HTTP status, headers (Retry-After) and body (google.rpc.Status,
partial_success), or a gRPC status code with RetryInfo in the status details. Spans of a
request that was not answered 2xx / OK are not kept as delivered.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from typing_extensions import Self


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
    resp = ExportTraceServiceResponse()
    resp.partial_success.rejected_spans = rejected
    resp.partial_success.error_message = message
    return resp.SerializeToString()


@dataclass(frozen=True)
class Request:
    """One request as the receiver saw it."""

    n: int  # 1, 2, ... in arrival order
    at: float  # time.monotonic() on arrival
    span_ids: tuple[str, ...]
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
    body: bytes = b""  # the ExportTraceServiceResponse of an OK


Decide = Callable[[Request], Any]


@dataclass
class _Log:
    requests: list[Request] = field(default_factory=list)
    answers: list[tuple[Request, Any]] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)  # span ids of 2xx/OK answers, repeats kept


class _Receiver:
    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self._lock = threading.Lock()
        self._log = _Log()

    def _request(self, body: bytes, size: int) -> Request:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        ids = tuple(s.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
        with self._lock:
            r = Request(len(self._log.requests) + 1, time.monotonic(), ids, size)
            self._log.requests.append(r)
        return r

    def _answered(self, req: Request, answer: Any, delivered: bool) -> None:
        with self._lock:
            self._log.answers.append((req, answer))
            if delivered:
                self._log.delivered.extend(req.span_ids)

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._log.requests)

    @property
    def answers(self) -> list[tuple[Request, Any]]:
        with self._lock:
            return list(self._log.answers)

    @property
    def delivered(self) -> list[str]:
        with self._lock:
            return list(self._log.delivered)

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.delivered) < count:
            time.sleep(0.02)
        return self.delivered


class HttpReceiver(_Receiver):
    """OTLP/HTTP: ``decide(request)`` returns an HttpAnswer (None: 200, empty body)."""

    def __init__(self, decide: Decide | None = None) -> None:
        super().__init__(decide or (lambda _r: None))
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a collector does

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
                req = receiver._request(body, len(raw))
                answer = receiver.decide(req) or HttpAnswer()
                receiver._answered(req, answer, 200 <= answer.status < 300)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                for k, v in answer.headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver(_Receiver):
    """OTLP/gRPC TraceService/Export: ``decide(request)`` returns a GrpcAnswer (None: OK)."""

    def __init__(self, decide: Decide | None = None) -> None:
        super().__init__(decide or (lambda _r: None))

        def export(body: bytes, context: grpc.ServicerContext) -> bytes:
            req = self._request(body, len(body))
            answer = self.decide(req) or GrpcAnswer()
            self._answered(req, answer, answer.code == grpc.StatusCode.OK)
            if answer.code != grpc.StatusCode.OK:
                context.set_trailing_metadata((("grpc-status-details-bin", status_body(
                    answer.code.value[0], answer.message, answer.retry_delay_s)),))
                context.abort(answer.code, answer.message)
            return answer.body

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None)
