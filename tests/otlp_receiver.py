"""A minimal OTLP/HTTP trace receiver on 127.0.0.1 for tests and benchmarks.

Decodes each POST /v1/traces body (protobuf, optionally gzip) with opentelemetry-proto and
keeps the spans as plain dicts with their arrival time. Can be told to refuse (503).
"""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self, decode: bool = True, port: int = 0) -> None:
        self.decode = decode
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.bytes = 0
        self.refuse = False
        # Cleared: requests wait (at most 10 s) for it before they are answered, a backend that
        # hangs; ``held`` counts those waiting now.
        self.answer = threading.Event()
        self.answer.set()
        self.held = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if not receiver.answer.is_set():
                    with receiver._lock:
                        receiver.held += 1
                    receiver.answer.wait(10.0)
                    with receiver._lock:
                        receiver.held -= 1
                if receiver.refuse:
                    self.send_response(503)
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

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _take(self, body: bytes) -> None:
        arrived = time.time_ns()
        with self._lock:
            self.requests += 1
            self.bytes += len(body)
        if not self.decode:
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        out = []
        for rs in req.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append({
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None, "name": s.name, "kind": s.kind,
                        "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                        "status": s.status.code, "status_message": s.status.message,
                        "attributes": {a.key: _value(a.value) for a in s.attributes},
                        "events": [e.name for e in s.events], "resource": resource, "arrived_ns": arrived,
                    })
        with self._lock:
            self.spans.extend(out)

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            time.sleep(0.02)
        with self._lock:
            return list(self.spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
