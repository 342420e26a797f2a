"""ccotel's own span path against the plain OpenTelemetry SDK route.

- ``pipeline_spans``: SpanRecords (and the assembled items they came from) of an in-process backfill.
- ``sdk_route``: the same spans made the SDK way, ``tracer.start_span`` (ids forced to ccotel's,
  same attributes, times, events, status) + ``span.end`` through a ``BatchSpanProcessor``.
- ``decode``/``normalise_*``: OTLP bytes and SpanRecords as comparable plain dicts.
- ``per_span_costs``: microseconds per span for ccotel (build_span + OTLP encode) and the SDK
  route (build_span for the attributes + start/end + BatchSpanProcessor + no-op or OTLP-encoding
  exporter).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, TraceFlags
from opentelemetry.trace import SpanKind as OtelKind
from opentelemetry.trace import StatusCode as OtelStatus

import ccotel.run.pipeline as ccotel_pipeline
from ccotel import __version__
from ccotel.assemble.model import Finished
from ccotel.export.otlp import encode_request
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans.build import build_span

__all__ = ["pipeline_spans", "sdk_route", "sdk_bytes", "decode", "diff", "normalise_record", "per_span_costs"]

_KIND = {1: OtelKind.INTERNAL, 2: OtelKind.SERVER, 3: OtelKind.CLIENT}


def pipeline_spans(root: str) -> tuple[list[SpanRecord], list[Finished]]:
    """What ``ccotel backfill`` builds for root, in process, with the assembled items."""
    finished: list[Finished] = []
    real = ccotel_pipeline.build_spans

    def recording(f: Finished, *args: Any) -> list[SpanRecord]:
        finished.append(f)
        return real(f, *args)

    spans: list[SpanRecord] = []
    ccotel_pipeline.build_spans = recording  # type: ignore[assignment]
    try:
        Pipeline(Options(roots=(root,)), emit=spans.extend).backfill()
    finally:
        ccotel_pipeline.build_spans = real  # type: ignore[assignment]
    return spans, finished


class _ForcedIds(IdGenerator):
    """Hands the SDK the ids ccotel derived, so both routes can be compared span for span."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


class _Collect(SpanExporter):
    def __init__(self, encode: bool = False, keep: bool = False) -> None:
        self.encode = encode
        self.keep = keep
        self.spans: list[ReadableSpan] = []
        self.count = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        if self.keep:
            self.spans.extend(spans)
        if self.encode:
            self.bytes += len(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def sdk_route(records: Sequence[SpanRecord], resource: dict[str, Any], exporter: _Collect) -> float:
    """Make every record a span the SDK way; returns the seconds taken, flush included."""
    ids = _ForcedIds()
    provider = TracerProvider(resource=Resource(resource), id_generator=ids)
    # big enough a queue that the processor drops nothing (it drops silently when full)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=len(records) + 1,
                                                   max_export_batch_size=512))
    tracer = provider.get_tracer("ccotel", __version__)
    empty = otel_context.Context()
    t0 = time.perf_counter()
    for s in records:
        ids.trace_id, ids.span_id = s.trace_id, s.span_id
        if s.parent_span_id:
            parent = NonRecordingSpan(SpanContext(s.trace_id, s.parent_span_id, is_remote=False,
                                                  trace_flags=TraceFlags(TraceFlags.SAMPLED)))
            ctx = otel_trace.set_span_in_context(parent, empty)
        else:
            ctx = empty
        span = tracer.start_span(s.name, context=ctx, kind=_KIND[int(s.kind)], attributes=s.attributes,
                                 start_time=s.start_ns)
        for e in s.events:
            span.add_event(e.name, e.attributes, e.time_ns)
        if s.status is StatusCode.ERROR:
            span.set_status(Status(OtelStatus.ERROR, s.status_message))
        span.end(end_time=s.end_ns)
    provider.force_flush(timeout_millis=600_000)
    elapsed = time.perf_counter() - t0
    provider.shutdown()
    return elapsed


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def decode(bodies: Iterable[bytes]) -> dict[str, dict[str, Any]]:
    """OTLP ExportTraceServiceRequest bodies -> {span_id hex: plain dict}."""
    out: dict[str, dict[str, Any]] = {}
    for body in bodies:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out[s.span_id.hex()] = {
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None, "name": s.name, "kind": s.kind,
                        "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                        "status": s.status.code, "status_message": s.status.message or None,
                        "attributes": {a.key: _value(a.value) for a in s.attributes},
                        "events": [(e.name, e.time_unix_nano, {a.key: _value(a.value) for a in e.attributes})
                                   for e in s.events],
                    }
    return out


def _plain(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def normalise_record(s: SpanRecord) -> dict[str, Any]:
    return {
        "trace_id": f"{s.trace_id:032x}", "span_id": f"{s.span_id:016x}",
        "parent_span_id": f"{s.parent_span_id:016x}" if s.parent_span_id else None, "name": s.name,
        "kind": int(s.kind), "start_ns": s.start_ns, "end_ns": s.end_ns, "status": int(s.status),
        "status_message": s.status_message if s.status is StatusCode.ERROR else None,
        "attributes": {k: _plain(v) for k, v in s.attributes.items() if v is not None},
        "events": [(e.name, e.time_ns, {k: _plain(v) for k, v in e.attributes.items() if v is not None})
                   for e in s.events],
    }


def diff(want: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]], limit: int = 5) -> list[str]:
    """Human-readable differences between two {span_id: span} maps (empty if equal)."""
    out = []
    for sid in sorted(set(want) | set(got)):
        a, b = want.get(sid), got.get(sid)
        if a == b:
            continue
        if a is None or b is None:
            out.append(f"span {sid}: {'missing' if b is None else 'unexpected'}")
        else:
            keys = [k for k in a if a[k] != b.get(k)]
            out.append(f"span {sid}: differs in {keys}")
        if len(out) >= limit:
            break
    return out


def per_span_costs(finished: Sequence[Finished], records: Sequence[SpanRecord], resource: dict[str, Any],
                   repeat: int = 3) -> dict[str, float]:
    """Microseconds per span (best of ``repeat``): ccotel's route and the SDK's, from the same items."""
    n = len(records)

    def best(fn: Any) -> float:
        return min(fn() for _ in range(repeat)) / n * 1e6

    def build() -> float:
        t0 = time.perf_counter()
        for f in finished:
            build_span(f)
        return time.perf_counter() - t0

    def encode() -> float:
        t0 = time.perf_counter()
        for i in range(0, n, 512):
            encode_request(records[i:i + 512], resource, "ccotel", __version__)
        return time.perf_counter() - t0

    build_us = best(build)
    encode_us = best(encode)
    sdk_noop_us = best(lambda: sdk_route(records, resource, _Collect()))
    sdk_otlp_us = best(lambda: sdk_route(records, resource, _Collect(encode=True)))
    return {
        "spans": n,
        "ccotel_build_us": build_us,
        "ccotel_encode_us": encode_us,
        "ccotel_us": build_us + encode_us,
        "sdk_noop_us": build_us + sdk_noop_us,  # the SDK needs the attributes built too
        "sdk_otlp_us": build_us + sdk_otlp_us,
    }


def sdk_bytes(records: Sequence[SpanRecord], resource: dict[str, Any]) -> list[bytes]:
    """The SDK route's spans, encoded by the SDK's own OTLP encoder."""
    ex = _Collect(keep=True)
    sdk_route(records, resource, ex)
    return [encode_spans(ex.spans[i:i + 512]).SerializeToString() for i in range(0, len(ex.spans), 512)]
