"""ccotel's hand-written OTLP encoder against the OpenTelemetry SDK's own encoder.

Same SpanRecords through both routes; the official protobuf classes decode both and the
messages must be equal: ids, parents, names, kinds, times, attributes of every type,
events, status, flags, resource.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, TraceFlags
from opentelemetry.trace import SpanKind as OtelKind
from opentelemetry.trace import StatusCode as OtelStatus

from ccotel import __version__
from ccotel.export.otlp import encode_request
from ccotel.records import SpanEvent, SpanKind, SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import list_fixtures, load_fixture

RESOURCE = {"service.name": "ccotel", "host.name": "h", "n": 3}


def sdk_span(s: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    ctx = SpanContext(s.trace_id, s.span_id, is_remote=False, trace_flags=TraceFlags(1))
    parent = SpanContext(s.trace_id, s.parent_span_id, is_remote=False, trace_flags=TraceFlags(1)) \
        if s.parent_span_id else None
    kind = {SpanKind.INTERNAL: OtelKind.INTERNAL, SpanKind.CLIENT: OtelKind.CLIENT}[s.kind]
    code = {StatusCode.UNSET: OtelStatus.UNSET, StatusCode.ERROR: OtelStatus.ERROR}[s.status]
    return ReadableSpan(
        name=s.name, context=ctx, parent=parent, resource=resource, attributes=s.attributes, kind=kind,
        events=[Event(e.name, e.attributes, e.time_ns) for e in s.events],
        status=Status(code, s.status_message if s.status is StatusCode.ERROR else None),
        start_time=s.start_ns, end_time=s.end_ns, instrumentation_scope=scope,
    )


def both(spans: list[SpanRecord]) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    ours = ExportTraceServiceRequest()
    ours.ParseFromString(encode_request(spans, RESOURCE, "ccotel", __version__))
    resource = Resource(RESOURCE)
    scope = InstrumentationScope("ccotel", __version__)
    theirs = encode_spans([sdk_span(s, resource, scope) for s in spans])
    return ours, theirs


def fixture_spans() -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for name in list_fixtures():
        p = Pipeline(Options(roots=(str(load_fixture(name).config_dir),)), emit=out.extend)
        p.backfill(close_all=True)
    return out


def test_fixture_spans_encode_like_the_sdk():
    spans = fixture_spans()
    assert len(spans) > 50
    ours, theirs = both(spans)
    assert ours == theirs


def test_every_attribute_type_and_events():
    s = SpanRecord(
        trace_id=(1 << 127) + 5, span_id=(1 << 63) + 7, parent_span_id=9, name="chat ünïcode",
        kind=SpanKind.CLIENT, start_ns=1_700_000_000_123_456_789, end_ns=1_700_000_001_000_000_000,
        attributes={"s": "x", "i": -12, "big": 2**62, "f": 0.25, "b": False, "t": True, "l": ("a", "b"),
                    "li": (1, 2), "e": ""},
        status=StatusCode.ERROR, status_message="orphaned",
        events=(SpanEvent("claude_code.compaction", 1_700_000_000_500_000_000, {"k": 1}),),
    )
    root = SpanRecord(trace_id=1, span_id=2, parent_span_id=None, name="r", kind=SpanKind.INTERNAL,
                      start_ns=1, end_ns=2, attributes={})
    ours, theirs = both([s, root])
    assert ours == theirs
