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
from .otlp import GrpcTransport, HttpTransport, TransportConfig, encode_request, encode_span, parse_headers
from .records import SpanRecord

__all__ = [
    "ConsoleSink",
    "ExportQueue",
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
    transport: TransportConfig

    @property
    def endpoint(self) -> str:
        return self.transport.endpoint


def _env(env: dict[str, str], name: str) -> str | None:
    """The traces-specific variable, else the general one (OTLP exporter spec)."""
    value = env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}")
    return value.strip() if value and value.strip() else None


def otlp_settings(env: dict[str, str] | None = None) -> OtlpSettings:
    """What the standard OTEL_EXPORTER_OTLP_* variables select; http/protobuf by default."""
    env = dict(os.environ) if env is None else env
    protocol = _env(env, "PROTOCOL") or "http/protobuf"
    if protocol not in ("grpc", "http/protobuf"):
        log.warning("unsupported OTLP protocol %r, using http/protobuf", protocol)
        protocol = "http/protobuf"
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if protocol == "grpc":
            endpoint = base or "http://localhost:4317"
        else:
            endpoint = (base.rstrip("/") + "/v1/traces") if base else "http://localhost:4318/v1/traces"
    timeout_s = 10.0
    raw_timeout = _env(env, "TIMEOUT")
    if raw_timeout:
        try:
            timeout_s = max(float(raw_timeout) / 1000.0, 0.1)
        except ValueError:
            log.warning("ignoring OTEL_EXPORTER_OTLP_TIMEOUT=%r (milliseconds expected)", raw_timeout)
    compression = _env(env, "COMPRESSION")
    insecure = _env(env, "INSECURE")
    return OtlpSettings(protocol, TransportConfig(
        endpoint=endpoint,
        headers=parse_headers(_env(env, "HEADERS") or ""),
        timeout_s=timeout_s,
        compression="gzip" if compression == "gzip" else None,
        insecure=None if insecure is None else insecure.lower() == "true",
        certificate=_env(env, "CERTIFICATE"),
    ))


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
    """OTLP over HTTP/protobuf or gRPC: our own encoder, one attempt per export."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.settings = otlp_settings(env)
        self.resource = resource_attributes(env)
        if self.settings.protocol == "grpc":
            self._transport: HttpTransport | GrpcTransport = GrpcTransport(self.settings.transport)
        else:
            self._transport = HttpTransport(self.settings.transport)

    def export(self, spans: Sequence[SpanRecord]) -> bool:
        try:
            body = encode_request(spans, self.resource, "ccotel", __version__)
        except Exception:  # noqa: BLE001 - one span that cannot be encoded must not block the rest
            good = [s for s in spans if _encodes(s)]
            log.error("dropped %d span(s) that cannot be encoded as OTLP", len(spans) - len(good))
            body = encode_request(good, self.resource, "ccotel", __version__)
        try:
            return self._transport.send(body)
        except Exception:  # noqa: BLE001 - a broken backend must never stop the sidecar
            log.debug("OTLP export raised", exc_info=True)
            return False

    def describe(self) -> str:
        return f"OTLP {self.settings.protocol} {self.settings.endpoint}"

    def shutdown(self) -> None:
        self._transport.close()


def _encodes(span: SpanRecord) -> bool:
    try:
        encode_span(span)
        return True
    except Exception:  # noqa: BLE001
        return False


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
                 max_backoff_s: float = 30.0, notify: Callable[[str], None] | None = None,
                 on_failure: Callable[[], None] | None = None) -> None:
        self.sink = sink
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.on_ack = on_ack
        self.max_backoff_s = max_backoff_s
        self.notify = notify or (lambda msg: log.warning("%s", msg))
        self.on_failure = on_failure
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
            if self.on_failure is not None:
                self.on_failure()
            if self.down_since is None:
                self.down_since = time.monotonic()
                self.notify(
                    f"trace backend not reachable at {self.sink.describe()}; spans are kept and sent "
                    "when it answers (set OTEL_EXPORTER_OTLP_ENDPOINT, or --traces-exporter console|none)")
        return ok
