"""Export stage: SpanRecords -> OTLP (gRPC or HTTP), the console, memory, or nowhere.

The sinks call the exporter themselves and return whether the backend acknowledged the batch:
the SDK's BatchSpanProcessor drops spans when its queue is full and never says what was
delivered. ``ExportQueue`` holds finished spans, ships them from one thread, retries with
backoff while the backend is away, and applies backpressure (``submit`` blocks) when full,
so memory stays bounded: the data waits in the transcript files instead.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

import orjson

from . import __version__
from .records import SpanKind, SpanRecord, StatusCode

__all__ = [
    "ConsoleSink",
    "ExportQueue",
    "MemorySink",
    "NoneSink",
    "OtlpSink",
    "SpanSink",
    "make_sink",
    "otlp_settings",
]

log = logging.getLogger("ccotel.export")


class SpanSink(Protocol):
    def export(self, spans: Sequence[SpanRecord]) -> bool: ...

    def describe(self) -> str: ...

    def shutdown(self) -> None: ...


class NoneSink:
    def export(self, spans: Sequence[SpanRecord]) -> bool:
        return True

    def describe(self) -> str:
        return "nowhere (--traces-exporter none)"

    def shutdown(self) -> None:
        pass


class MemorySink:
    """The test double: keeps every acknowledged span; can be told to refuse."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.refuse = False
        self.calls = 0

    def export(self, spans: Sequence[SpanRecord]) -> bool:
        self.calls += 1
        if self.refuse:
            return False
        self.spans.extend(spans)
        return True

    def describe(self) -> str:
        return "memory"

    def shutdown(self) -> None:
        pass


def span_to_dict(s: SpanRecord) -> dict[str, object]:
    return {
        "trace_id": f"{s.trace_id:032x}",
        "span_id": f"{s.span_id:016x}",
        "parent_span_id": f"{s.parent_span_id:016x}" if s.parent_span_id else None,
        "name": s.name,
        "kind": s.kind.name,
        "start_ns": s.start_ns,
        "end_ns": s.end_ns,
        "status": s.status.name,
        "status_message": s.status_message,
        "attributes": s.attributes,
        "events": [{"name": e.name, "time_ns": e.time_ns, "attributes": e.attributes} for e in s.events],
    }


class ConsoleSink:
    """One JSON object per span on stdout (or a given stream)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def export(self, spans: Sequence[SpanRecord]) -> bool:
        for s in spans:
            self.out.write(orjson.dumps(span_to_dict(s)).decode() + "\n")
        self.out.flush()
        return True

    def describe(self) -> str:
        return "stdout (--traces-exporter console)"

    def shutdown(self) -> None:
        pass


@dataclass(frozen=True)
class OtlpSettings:
    protocol: str  # grpc | http/protobuf
    endpoint: str


def otlp_settings(env: dict[str, str] | None = None) -> OtlpSettings:
    """Protocol and endpoint the standard OTEL_EXPORTER_OTLP_* variables select (http/protobuf default)."""
    env = dict(os.environ) if env is None else env
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol not in ("grpc", "http/protobuf"):
        log.warning("unsupported OTLP protocol %r, using http/protobuf", protocol)
        protocol = "http/protobuf"
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if protocol == "grpc":
            endpoint = base or "http://localhost:4317"
        else:
            endpoint = (base.rstrip("/") + "/v1/traces") if base else "http://localhost:4318/v1/traces"
    return OtlpSettings(protocol, endpoint)


def resource_attributes(env: dict[str, str] | None = None) -> dict[str, str]:
    """service.name=ccotel, service.version, host.name; then OTEL_RESOURCE_ATTRIBUTES
    (k=v,k2=v2, percent-encoded values) and OTEL_SERVICE_NAME on top, as the spec orders them."""
    env = dict(os.environ) if env is None else env
    attrs = {"service.name": "ccotel", "service.version": __version__, "host.name": socket.gethostname()}
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attrs[key.strip()] = urllib.parse.unquote(value.strip())
        elif item.strip():
            log.warning("ignoring malformed OTEL_RESOURCE_ATTRIBUTES item %r", item)
    if env.get("OTEL_SERVICE_NAME", "").strip():
        attrs["service.name"] = env["OTEL_SERVICE_NAME"].strip()
    return attrs


class OtlpSink:
    """OTLP over gRPC or HTTP through the SDK's exporters, fed ReadableSpans we build ourselves."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.settings = otlp_settings(env)
        from opentelemetry.sdk.resources import Resource

        self.resource = Resource(resource_attributes(env))
        self.scope = InstrumentationScope("ccotel", __version__)
        # The SDK exporter logs every failed attempt; ExportQueue reports outages once instead.
        for name in ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                     "opentelemetry.exporter.otlp.proto.grpc.exporter",
                     "opentelemetry.exporter.otlp.proto.http._common",
                     "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        if self.settings.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            self._exporter = GrpcExporter(endpoint=self.settings.endpoint, timeout=10)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

            self._exporter = HttpExporter(endpoint=self.settings.endpoint, timeout=10)

    def export(self, spans: Sequence[SpanRecord]) -> bool:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._exporter.export([self._readable(s) for s in spans])
        except Exception:  # noqa: BLE001 - a broken backend must never stop the sidecar
            log.debug("OTLP export raised", exc_info=True)
            return False
        return result is SpanExportResult.SUCCESS

    def describe(self) -> str:
        return f"OTLP {self.settings.protocol} {self.settings.endpoint}"

    def shutdown(self) -> None:
        try:
            self._exporter.shutdown()
        except Exception:  # noqa: BLE001
            pass

    def _readable(self, s: SpanRecord):  # type: ignore[no-untyped-def]
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, Status, TraceFlags
        from opentelemetry.trace import SpanKind as OtelKind
        from opentelemetry.trace import StatusCode as OtelStatus

        flags = TraceFlags(TraceFlags.SAMPLED)
        ctx = SpanContext(s.trace_id, s.span_id, is_remote=False, trace_flags=flags)
        parent = SpanContext(s.trace_id, s.parent_span_id, is_remote=False, trace_flags=flags) \
            if s.parent_span_id else None
        kind = {SpanKind.INTERNAL: OtelKind.INTERNAL, SpanKind.CLIENT: OtelKind.CLIENT,
                SpanKind.SERVER: OtelKind.SERVER}[s.kind]
        status = {StatusCode.UNSET: OtelStatus.UNSET, StatusCode.OK: OtelStatus.OK,
                  StatusCode.ERROR: OtelStatus.ERROR}[s.status]
        return ReadableSpan(
            name=s.name, context=ctx, parent=parent, resource=self.resource,
            attributes=s.attributes, kind=kind,
            events=[Event(e.name, e.attributes, e.time_ns) for e in s.events],
            status=Status(status, s.status_message if s.status is StatusCode.ERROR else None),
            start_time=s.start_ns, end_time=s.end_ns, instrumentation_scope=self.scope,
        )


def make_sink(name: str, env: dict[str, str] | None = None) -> SpanSink:
    if name == "otlp":
        return OtlpSink(env)
    if name == "console":
        return ConsoleSink()
    if name == "none":
        return NoneSink()
    raise ValueError(f"unknown traces exporter {name!r} (otlp, console, none)")


class ExportQueue:
    """Ships spans from one thread in batches; retries forever with capped backoff.

    ``on_ack`` is called with every batch the backend acknowledged (checkpoints hang on it).
    """

    def __init__(self, sink: SpanSink, max_pending: int = 20_000, batch_size: int = 512,
                 on_ack: Callable[[Sequence[SpanRecord]], None] | None = None,
                 max_backoff_s: float = 30.0, notify: Callable[[str], None] | None = None) -> None:
        self.sink = sink
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.on_ack = on_ack
        self.max_backoff_s = max_backoff_s
        self.notify = notify or (lambda msg: log.warning("%s", msg))
        self._q: deque[SpanRecord] = deque()
        self._inflight = 0
        self._cv = threading.Condition()
        self._stop = False
        self.exported = 0
        self.failures = 0
        self.down_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name="ccotel-export", daemon=True)
        self._thread.start()

    def submit(self, spans: Sequence[SpanRecord], block_s: float | None = None) -> bool:
        """Queue spans; blocks while the queue is full (backpressure). False if block_s ran out."""
        if not spans:
            return True
        deadline = None if block_s is None else time.monotonic() + block_s
        with self._cv:
            while len(self._q) >= self.max_pending and not self._stop:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cv.wait(timeout=remaining if remaining is not None else 1.0)
            self._q.extend(spans)
            self._cv.notify_all()
        return True

    def pending(self) -> int:
        with self._cv:
            return len(self._q) + self._inflight

    def flush(self, timeout_s: float | None = None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            while self._q or self._inflight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cv.wait(timeout=min(remaining, 0.5) if remaining is not None else 0.5)
        return True

    def close(self, timeout_s: float | None = 10.0) -> bool:
        ok = self.flush(timeout_s)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=5)
        self.sink.shutdown()
        return ok

    def _loop(self) -> None:
        backoff = 0.5
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if self._stop and not self._q:
                    return
                batch = [self._q.popleft() for _ in range(min(self.batch_size, len(self._q)))]
                self._inflight = len(batch)
            while True:
                ok = self._export(batch)
                if ok:
                    backoff = 0.5
                    break
                with self._cv:
                    if self._stop:
                        self._q.extendleft(reversed(batch))
                        self._inflight = 0
                        self._cv.notify_all()
                        return
                    self._cv.wait(timeout=backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
            with self._cv:
                self._inflight = 0
                self._cv.notify_all()

    def _export(self, batch: list[SpanRecord]) -> bool:
        ok = self.sink.export(batch)
        if ok:
            self.exported += len(batch)
            if self.down_since is not None:
                self.notify(f"trace backend answers again ({self.sink.describe()}); sending held spans")
                self.down_since = None
            if self.on_ack is not None:
                self.on_ack(batch)
        else:
            self.failures += 1
            if self.down_since is None:
                self.down_since = time.monotonic()
                self.notify(
                    f"trace backend not reachable at {self.sink.describe()}; spans are kept and sent "
                    "when it answers (set OTEL_EXPORTER_OTLP_ENDPOINT, or --traces-exporter console|none)")
        return ok
