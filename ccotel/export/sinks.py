"""Export stage: SpanRecords -> OTLP (gRPC or HTTP), the console, memory, or nowhere.

The sinks call the exporter themselves and return what became of the batch, an ``ExportResult``
(export/result.py): OK (delivered, maybe with some spans rejected), RETRY (nothing delivered,
try again) or DROP (refused for good). The SDK's BatchSpanProcessor drops spans when its queue
is full and never says what was delivered. ``ExportQueue`` holds finished spans and ships them
from one thread: it retries with backoff (honouring what the backend asks) while the backend is
away or throttles, applying backpressure (``submit`` blocks) when full so memory stays bounded
(the data waits in the transcript files instead); it splits a batch the backend finds too large;
and it hands delivered *and* dropped spans to ``on_ack`` with the result, since both are final:
one batch the backend will never take must not stop the rest.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import sys
import threading
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

import orjson

from ccotel import __version__
from ccotel.export.closed import OutputClosed, discard
from ccotel.export.memory_sink import MemorySink
from ccotel.export.otlp import encode_request, encode_span
from ccotel.export.result import (
    CONNECTIVITY_REASONS,
    OK,
    REASON_ERROR,
    REASON_PARTIAL,
    REASON_THROTTLED,
    REASON_TOO_LARGE,
    REASON_UNENCODABLE,
    ExportResult,
    Outcome,
)
from ccotel.export.transport import (
    ConfigError,
    GrpcTransport,
    HttpTransport,
    Transport,
    TransportConfig,
    check_certificate,
    check_endpoint,
    parse_headers,
)
from ccotel.records import SpanRecord

__all__ = [
    "ConsoleSink",
    "ExportQueue",
    "ExportResult",
    "MemorySink",
    "NoneSink",
    "OtlpSink",
    "Outcome",
    "OutputClosed",
    "SpanSink",
    "make_sink",
    "otlp_config_error",
    "otlp_settings",
]

log = logging.getLogger("ccotel.export")


class SpanSink(Protocol):
    def export(self, spans: Sequence[SpanRecord]) -> ExportResult: ...

    def describe(self) -> str: ...

    def shutdown(self) -> None: ...


class NoneSink:
    def export(self, spans: Sequence[SpanRecord]) -> ExportResult:
        return OK

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

    def export(self, spans: Sequence[SpanRecord]) -> ExportResult:
        try:
            for s in spans:
                self.out.write(orjson.dumps(span_to_dict(s)).decode() + "\n")
            self.out.flush()
        except BrokenPipeError as exc:  # `| head` has what it wanted: not an outage, nothing to retry
            discard(self.out)
            raise OutputClosed(str(exc)) from exc
        return OK

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


def _headers(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The OTLP headers (raises HeaderError, naming the variable and the header, never a value)."""
    name = "OTEL_EXPORTER_OTLP_TRACES_HEADERS" if env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") else \
        "OTEL_EXPORTER_OTLP_HEADERS"
    return parse_headers(_env(env, "HEADERS") or "", name)


def _endpoint(env: dict[str, str], protocol: str) -> tuple[str, str]:
    """The traces endpoint and the variable it came from (checked: raises ConfigError)."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    source = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        source = "OTEL_EXPORTER_OTLP_ENDPOINT"
        if protocol == "grpc":
            endpoint = base or "http://localhost:4317"
        else:
            endpoint = (base.rstrip("/") + "/v1/traces") if base else "http://localhost:4318/v1/traces"
    check_endpoint(endpoint, protocol == "grpc", source)
    return endpoint, source


def _certificate(env: dict[str, str]) -> str | None:
    path = _env(env, "CERTIFICATE")
    if path is not None:
        check_certificate(path, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE" if env.get(
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "").strip() else "OTEL_EXPORTER_OTLP_CERTIFICATE")
    return path


def _protocol(env: dict[str, str], warn: bool = True) -> str:
    protocol = _env(env, "PROTOCOL") or "http/protobuf"
    if protocol not in ("grpc", "http/protobuf"):
        if warn:
            log.warning("unsupported OTLP protocol %r, using http/protobuf", protocol)
        protocol = "http/protobuf"
    return protocol


def otlp_config_error(env: dict[str, str] | None = None) -> str | None:
    """Why the OTLP exporter's configuration cannot work (an endpoint that is not a URL, a header
    no request can carry, a certificate that cannot be read), or None: checked before a command
    that exports does any work, since no retry could ever send it."""
    env = dict(os.environ) if env is None else env
    try:
        _headers(env)
        _endpoint(env, _protocol(env, warn=False))
        _certificate(env)
    except ConfigError as exc:
        return str(exc)
    return None


def otlp_settings(env: dict[str, str] | None = None) -> OtlpSettings:
    """What the standard OTEL_EXPORTER_OTLP_* variables select; http/protobuf by default. Raises
    ConfigError for what otlp_config_error refuses."""
    env = dict(os.environ) if env is None else env
    protocol = _protocol(env)
    endpoint, _source = _endpoint(env, protocol)
    timeout_s = 10.0
    raw_timeout = _env(env, "TIMEOUT")
    if raw_timeout:
        try:
            ms = float(raw_timeout)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms):
            timeout_s = max(ms / 1000.0, 0.1)
        else:  # as the OpenTelemetry spec asks of a number it cannot use: ignored, with a warning
            log.warning("ignoring OTEL_EXPORTER_OTLP_TIMEOUT=%r (milliseconds expected)", raw_timeout[:40])
    compression = _env(env, "COMPRESSION")
    insecure = _env(env, "INSECURE")
    return OtlpSettings(protocol, TransportConfig(
        endpoint=endpoint,
        headers=_headers(env),
        timeout_s=timeout_s,
        compression="gzip" if compression == "gzip" else None,
        insecure=None if insecure is None else insecure.lower() == "true",
        certificate=_certificate(env),
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
            self._transport: Transport = GrpcTransport(self.settings.transport)
        else:
            self._transport = HttpTransport(self.settings.transport)

    def export(self, spans: Sequence[SpanRecord]) -> ExportResult:
        sent: Sequence[SpanRecord] = spans
        try:
            body = encode_request(spans, self.resource, "ccotel", __version__)
        except Exception:  # one span that cannot be encoded must not block the rest
            log.debug("a batch of %d span(s) does not encode as OTLP", len(spans), exc_info=True)
            sent = [s for s in spans if _encodes(s)]
            if not sent:
                return ExportResult.drop(len(spans), REASON_UNENCODABLE, "spans ccotel cannot encode as OTLP")
            body = encode_request(sent, self.resource, "ccotel", __version__)
        try:
            result = self._transport.send(body, len(sent))
        except Exception as exc:  # a broken backend must never stop the sidecar
            log.debug("OTLP export raised", exc_info=True)
            result = ExportResult.retry(REASON_ERROR, f"{type(exc).__name__}: {exc}")
        return result.plus_dropped(len(spans) - len(sent), REASON_UNENCODABLE)

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
    if name == "memory":
        return MemorySink()
    raise ValueError(f"unknown traces exporter {name!r} (otlp, console, none, memory)")


#: ``on_ack``: spans that are final, with what became of them. ``result.drops`` says how many
#: were dropped and why (all of a DROP, the rejected ones of a partial success); the rest were
#: delivered. Checkpoints hang on it: dropped spans will never be delivered, so waiting for
#: them would stop the checkpoint for good.
AckCallback = Callable[[Sequence[SpanRecord], ExportResult], None]

_RETRY_AFTER_FLOOR_S = 0.05  # a backend asking for no wait at all still gets no busy loop
_GROW_AFTER = 8  # batches delivered at a reduced size before the size doubles again


class ExportQueue:
    """Ships spans from one thread in batches, acting on each batch's ``ExportResult``.

    - OK: ``on_ack(batch, result)``; spans the backend rejected (partial success) are counted
      in ``dropped`` by reason, the rest in ``exported``.
    - RETRY: the same batch again after capped exponential backoff with jitter, or after the
      wait the backend named (Retry-After, RetryInfo), until it answers otherwise. Meanwhile
      ``submit`` blocks once ``max_pending`` spans wait (backpressure).
    - DROP: final. Reason ``too_large`` with more than one span: the halves are sent instead
      (and later batches are smaller for a while); otherwise ``on_ack(batch, result)`` moves the
      checkpoints past the batch and ``dropped`` counts it by reason. The backend's message is
      logged once per reason.

    ``on_failure`` is called for every attempt that was not OK; ``on_result`` with every result.

    A sink whose output was closed (``OutputClosed``: `| head` went away) ends the queue: nothing
    is retried or acknowledged, ``submit`` and ``flush`` no longer wait, and ``on_closed`` is
    called once (the command then ends quietly).
    """

    def __init__(self, sink: SpanSink, max_pending: int = 20_000, batch_size: int = 512,
                 on_ack: AckCallback | None = None,
                 max_backoff_s: float = 30.0, notify: Callable[[str], None] | None = None,
                 on_failure: Callable[[], None] | None = None, *, min_backoff_s: float = 0.5,
                 max_retry_after_s: float = 300.0,
                 on_result: Callable[[ExportResult], None] | None = None,
                 on_closed: Callable[[], None] | None = None) -> None:
        self.sink = sink
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.on_ack = on_ack
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.notify = notify or (lambda msg: log.warning("%s", msg))
        self.on_failure = on_failure
        self.on_result = on_result
        self.on_closed = on_closed
        self.closed = False  # the sink's output went away: nothing more is sent
        self._q: deque[SpanRecord] = deque()
        self._inflight = 0
        self._cv = threading.Condition()
        self._stop = False
        self.exported = 0  # spans delivered
        self.dropped: Counter[str] = Counter()  # spans that are final but not delivered, by reason
        self.failures = 0  # attempts that were not OK
        self.down_since: float | None = None
        self._cap = batch_size  # the batch size now: smaller after a "too large"
        self._at_cap = 0
        self._told: set[str] = set()  # reasons whose first occurrence was logged
        self._thread = threading.Thread(target=self._loop, name="ccotel-export", daemon=True)
        self._thread.start()

    def submit(self, spans: Sequence[SpanRecord], block_s: float | None = None) -> bool:
        """Queue spans; blocks while the queue is full (backpressure). False if block_s ran out."""
        if not spans or self.closed:
            return True  # closed: the spans go nowhere, and nothing may wait for them
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
            while (self._q or self._inflight) and not self.closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cv.wait(timeout=min(remaining, 0.5) if remaining is not None else 0.5)
        return True

    def drop_unsent(self) -> None:
        """Forget the spans not sent yet (a stop: their lines are not checkpointed, a restart
        reads them again) and wake whatever waits on the queue. A batch being sent is let finish."""
        with self._cv:
            self._q.clear()
            self._cv.notify_all()

    def abandon(self, until: float) -> bool:
        """Stop the export thread after the batch it is sending (its acknowledgement reaches
        on_ack), dropping what is unsent; wait for that until the monotonic time ``until``.
        False if the batch was still out then (the backend may take it: a restart may send it again)."""
        with self._cv:
            self._q.clear()
            self._stop = True
            self._cv.notify_all()
            while self._inflight:
                remaining = until - time.monotonic()
                if remaining <= 0:
                    log.warning("%d spans were still out to the trace backend at the stop: if it takes them, "
                                "a restart sends them again (same ids)", self._inflight)
                    return False
                self._cv.wait(timeout=min(remaining, 0.05))
        self._thread.join(timeout=max(until - time.monotonic(), 0.0))
        return True

    def close(self, timeout_s: float | None = 10.0) -> bool:
        ok = self.flush(timeout_s)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=5)
        self.sink.shutdown()
        return ok

    # -- the export thread -------------------------------------------------------------------

    def _loop(self) -> None:
        backoff = self.min_backoff_s
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if self._stop and not self._q:
                    return
                batch = [self._q.popleft() for _ in range(min(self._cap, len(self._q)))]
                self._inflight = len(batch)
            while True:
                try:
                    result = self._attempt(batch)
                except OutputClosed:
                    self._close_output()
                    return
                if result.outcome is not Outcome.RETRY:
                    backoff = self.min_backoff_s
                    break
                self._outage(result)
                delay = self._delay(result, backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                with self._cv:
                    if not self._stop:
                        self._cv.wait(timeout=delay)
                    if self._stop:
                        self._q.extendleft(reversed(batch))
                        self._inflight = 0
                        self._cv.notify_all()
                        return
            self._answered()
            if result.outcome is Outcome.DROP and result.reason == REASON_TOO_LARGE and len(batch) > 1:
                self._split(batch, result)
                continue
            self._settle(batch, result)
            with self._cv:
                self._inflight = 0
                self._cv.notify_all()

    def _attempt(self, batch: list[SpanRecord]) -> ExportResult:
        try:
            result = self.sink.export(batch)
        except OutputClosed:
            raise
        except Exception as exc:  # a sink's bug must not end the export thread
            log.debug("sink %s raised", self.sink.describe(), exc_info=True)
            result = ExportResult.retry(REASON_ERROR, f"{type(exc).__name__}: {exc}")
        if self.on_result is not None:
            self.on_result(result)
        if result.outcome is not Outcome.OK:
            self.failures += 1
            if self.on_failure is not None:
                self.on_failure()
        return result

    def _close_output(self) -> None:
        """The sink's output went away: drop what is queued and the batch (never acknowledged:
        nothing of it was read), stop, and wake whatever waits on the queue."""
        log.debug("the output of %s was closed: export ends", self.sink.describe())
        with self._cv:
            self.closed = True
            self._q.clear()
            self._inflight = 0
            self._stop = True
            self._cv.notify_all()
        if self.on_closed is not None:
            self.on_closed()

    def _delay(self, result: ExportResult, backoff: float) -> float:
        if result.retry_after is not None:
            return min(max(result.retry_after, _RETRY_AFTER_FLOOR_S), self.max_retry_after_s)
        return backoff * random.uniform(0.8, 1.2)

    def _split(self, batch: list[SpanRecord], result: ExportResult) -> None:
        """The backend found the batch too large: its halves go first, and batches stay that
        small until _GROW_AFTER of them were delivered."""
        half = len(batch) // 2
        self._tell_once(f"split:{result.reason}",
                        f"trace backend at {self.sink.describe()} refused {len(batch)} spans in one request "
                        f"({result.message or result.reason}); sending them in smaller batches")
        with self._cv:
            self._cap = max(1, min(self._cap, half))
            self._at_cap = 0
            self._q.extendleft(reversed(batch))
            self._inflight = 0
            self._cv.notify_all()

    def _settle(self, batch: list[SpanRecord], result: ExportResult) -> None:
        """The batch is final: delivered, dropped, or partly each."""
        result = result.fitted(len(batch))
        self.exported += len(batch) - result.dropped
        for reason, n in result.drops:
            self.dropped[reason] += n
            self._tell_drop(reason, n, result)
        if result.outcome is Outcome.OK and not result.drops and result.message:
            self._tell_once(f"warning:{result.reason}", f"trace backend at {self.sink.describe()} took the "
                            f"spans with a warning: {result.message}")
        if result.outcome is Outcome.OK and self._cap < self.batch_size and len(batch) >= self._cap:
            self._at_cap += 1
            if self._at_cap >= _GROW_AFTER:
                self._cap, self._at_cap = min(self._cap * 2, self.batch_size), 0
        if self.on_ack is not None:
            self.on_ack(batch, result)

    def _tell_drop(self, reason: str, n: int, result: ExportResult) -> None:
        where = self.sink.describe()
        if reason == REASON_UNENCODABLE:
            text = f"dropped {n} span(s) that cannot be encoded as OTLP"
        elif reason == REASON_PARTIAL:
            text = f"trace backend at {where} rejected {n} of the spans it was sent ({result.message})"
        elif reason == REASON_TOO_LARGE:
            text = f"trace backend at {where} refused a single span as too large ({result.message})"
        else:
            text = f"trace backend at {where} rejected {n} span(s) ({result.message or reason})"
        self._tell_once(f"drop:{reason}", f"{text}; dropped, not retried. Further drops for this reason are "
                        f"counted in ccotel_spans_dropped_total{{reason=\"{reason}\"}}, not logged",
                        f"{text}; dropped")

    def _tell_once(self, key: str, first: str, later: str | None = None) -> None:
        if key in self._told:
            log.debug("%s", later or first)
            return
        self._told.add(key)
        self.notify(first)

    def _outage(self, result: ExportResult) -> None:
        if self.down_since is not None:
            log.debug("export retried: %s", result.message or result.reason)
            return
        self.down_since = time.monotonic()
        where, said = self.sink.describe(), result.message or result.reason
        if result.reason in CONNECTIVITY_REASONS:
            self.notify(f"trace backend not reachable at {where} ({said}); spans are kept and sent when it "
                        "answers (set OTEL_EXPORTER_OTLP_ENDPOINT, or --traces-exporter console|none)")
        elif result.reason == REASON_THROTTLED:
            self.notify(f"trace backend at {where} asks ccotel to slow down ({said}); spans are kept and "
                        "sent again")
        else:
            self.notify(f"trace backend at {where} could not take spans now ({said}); they are kept and "
                        "sent again")

    def _answered(self) -> None:
        if self.down_since is not None:
            self.notify(f"trace backend answers again ({self.sink.describe()}); sending held spans")
            self.down_since = None
