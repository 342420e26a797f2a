"""Phoenix as a real trace backend: backdated spans with our own ids round-trip.

Sends hand-built ``ReadableSpan`` objects (explicit 2025 timestamps, explicit
trace/span ids, parent links, CLIENT/INTERNAL kinds, ERROR status with a message,
int/str/bool/float/list attributes, a resource with service.name) through the
OpenTelemetry SDK's OTLP exporters, over HTTP and over gRPC, reads them back over
Phoenix's REST API and checks every field.  What Phoenix keeps, changes and drops
is written down in ``tests/support/phoenix.py``; these tests pin it.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: E402
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: E402
from opentelemetry.sdk.util.instrumentation import InstrumentationScope  # noqa: E402
from opentelemetry.trace import (  # noqa: E402
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from tests.support.fixtures import phoenix  # noqa: E402,F401
from tests.support.phoenix import PhoenixServer, phoenix_time_ns  # noqa: E402

pytestmark = pytest.mark.phoenix

SCOPE = InstrumentationScope("ccotel-test", "0.0.1")
RESOURCE = Resource.create({"service.name": "ccotel-test", "service.version": "0.0.1"})
_UNSET = Status(StatusCode.UNSET)


def ns(iso: str) -> int:
    """Exact ns of an ISO time (no float)."""
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


def make_span(
    name: str,
    trace_id: int,
    span_id: int,
    parent_id: int | None,
    start: int,
    end: int,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    status: Status = _UNSET,
    resource: Resource = RESOURCE,
) -> ReadableSpan:
    ctx = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    parent = (
        SpanContext(trace_id, parent_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        if parent_id is not None
        else None
    )
    return ReadableSpan(
        name=name,
        context=ctx,
        parent=parent,
        resource=resource,
        attributes=attributes or {},
        kind=kind,
        start_time=start,
        end_time=end,
        status=status,
        instrumentation_scope=SCOPE,
    )


def one_trace(trace_id: int, base: int, tag: str) -> list[ReadableSpan]:
    """invoke_agent -> chat (CLIENT) -> execute_tool (ERROR), plus a plain span.

    ``base`` is a whole-millisecond time; the chat span uses ns offsets that are
    not whole microseconds, to show Phoenix's rounding.
    """
    root = ((trace_id >> 64) & ~0xFF) | 0x10  # any non-zero 64-bit id of ours
    return [
        make_span(
            "invoke_agent claude-code",
            trace_id,
            root,
            None,
            base,
            base + 9_000_000_000,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "claude-code",
                "gen_ai.conversation.id": f"session-{tag}",
                "claude_code.version": "2.1.39",
                "claude_code.tags": ["a", "b", "c"],
                "claude_code.turn_index": 3,
            },
        ),
        make_span(
            "chat claude-opus-4-6",
            trace_id,
            root + 1,
            root,
            base + 1_000_000_123,  # not a whole microsecond: rounded by Phoenix
            base + 4_000_000_999,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": "claude-opus-4-6",
                "gen_ai.response.model": "claude-opus-4-6",
                "gen_ai.response.id": f"msg_{tag}",
                "gen_ai.response.finish_reasons": ["tool_use"],
                "gen_ai.usage.input_tokens": 35_111,
                "gen_ai.usage.output_tokens": 299,
                "gen_ai.usage.cache_read.input_tokens": 29_509,
                "gen_ai.usage.cache_creation.input_tokens": 5_601,
                "claude_code.input_tokens": 1,
                "claude_code.uuid": f"uuid-{tag}",
                "claude_code.parent_uuid": f"parent-{tag}",
                "claude_code.request_id": f"req_{tag}",
                "claude_code.is_sidechain": False,
                "claude_code.line_numbers": [114, 115, 116, 120, 124],
                "claude_code.cost_usd": 0.125,
            },
            status=Status(StatusCode.OK),
        ),
        make_span(
            "execute_tool Bash",
            trace_id,
            root + 2,
            root + 1,
            base + 2_000_000_000,
            base + 3_000_000_000,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "Bash",
                "gen_ai.tool.call.id": f"toolu_{tag}",
                "error.type": "orphaned",
            },
            status=Status(StatusCode.ERROR, "tool_use without tool_result (process killed)"),
        ),
        make_span(
            "plain child",
            trace_id,
            root + 3,
            root,
            base + 5_000_000_000,
            base + 5_000_000_000,
            attributes={"x.int": -7, "x.str": "héllo ✓", "x.empty": "", "x.float": 2.5},
        ),
    ]


def export(exporter: Any, spans: list[ReadableSpan]) -> None:
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def http_exporter(server: PhoenixServer) -> HttpSpanExporter:
    return HttpSpanExporter(endpoint=server.otlp_http_endpoint, timeout=10)


def grpc_exporter(server: PhoenixServer) -> GrpcSpanExporter:
    return GrpcSpanExporter(endpoint=server.otlp_grpc_endpoint, insecure=True, timeout=10)


# What Phoenix adds from the gen_ai.* attributes (OpenInference), per span name.
EXPECTED_KIND = {
    "invoke_agent claude-code": "AGENT",
    "chat claude-opus-4-6": "LLM",
    "execute_tool Bash": "TOOL",
    "plain child": "UNKNOWN",
}


def check_round_trip(sent: list[ReadableSpan], got: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Assert every field of every sent span; return the attribute keys Phoenix added."""
    by_id = {g["span_id"]: g for g in got}
    added: dict[str, set[str]] = {}
    for span in sent:
        span_hex = format(span.context.span_id, "016x")
        assert span_hex in by_id, f"span {span.name} ({span_hex}) not in Phoenix"
        g = by_id[span_hex]
        assert g["trace_id"] == format(span.context.trace_id, "032x")
        assert g["parent_id"] == (format(span.parent.span_id, "016x") if span.parent else None)
        assert g["name"] == span.name
        # Times: microseconds, rounded through a float (phoenix_time_ns); < 1 us off.
        for field, sent_ns in (("start_time_unix_nano", span.start_time), ("end_time_unix_nano", span.end_time)):
            assert g[field] == phoenix_time_ns(sent_ns), (span.name, field)
            assert abs(g[field] - sent_ns) < 1_000
            if sent_ns % 1_000 == 0:
                assert g[field] == sent_ns, "whole microseconds must round-trip exactly"
        assert g["start_time"].tzinfo is not None
        code = {StatusCode.UNSET: "UNSET", StatusCode.OK: "OK", StatusCode.ERROR: "ERROR"}
        assert g["status_code"] == code[span.status.status_code]
        assert g["status_message"] == (span.status.description or "")
        # OTel SpanKind is dropped; span_kind is the OpenInference kind.
        assert g["span_kind"] == EXPECTED_KIND[span.name]
        sent_attrs = dict(span.attributes or {})
        for key, value in sent_attrs.items():
            assert key in g["attributes"], f"{span.name}: {key} dropped"
            want = list(value) if isinstance(value, tuple) else value
            assert g["attributes"][key] == want, (span.name, key)
            assert type(g["attributes"][key]) is type(want), (span.name, key)
        for key in RESOURCE.attributes:
            assert key not in g["attributes"], "resource attributes are not returned"
        added[span.name] = set(g["attributes"]) - set(sent_attrs)
    return added


def test_http_round_trip_backdated_spans_with_our_ids(phoenix: PhoenixServer) -> None:
    trace_id = 0x0A0B0C0D0E0F10111213141516171819
    base = ns("2025-03-01T10:00:00.123Z")
    sent = one_trace(trace_id, base, "http")
    export(http_exporter(phoenix), sent)
    got = phoenix.wait_for_spans(len(sent), trace_ids=[format(trace_id, "032x")], timeout=30)
    assert len(got) == len(sent)
    added = check_round_trip(sent, got)

    # Phoenix's OpenInference synthesis: added, never overriding ours.
    by_name = {g["name"]: g for g in got}
    assert {name: {k: by_name[name]["attributes"][k] for k in keys} for name, keys in added.items()} == {
        "invoke_agent claude-code": {"session.id": "session-http"},
        "chat claude-opus-4-6": {
            "llm.finish_reason": "tool_use",
            "llm.model_name": "claude-opus-4-6",
            "llm.provider": "anthropic",
            "llm.system": "anthropic",
            "llm.token_count.completion": 299,
            "llm.token_count.prompt": 35_111,
            "llm.token_count.prompt_details.cache_read": 29_509,
            "llm.token_count.prompt_details.cache_write": 5_601,
            "llm.token_count.total": 35_410,
            "output.mime_type": "application/json",
            "output.value": '{"id": "msg_http", "model": "claude-opus-4-6"}',
        },
        "execute_tool Bash": {"tool.id": "toolu_http", "tool.name": "Bash"},
        "plain child": {},
    }

    # Times as Phoenix shows them: ISO 8601 with microseconds.
    root = by_name["invoke_agent claude-code"]
    assert root["start_time"] == datetime(2025, 3, 1, 10, 0, 0, 123_000, tzinfo=timezone.utc)
    assert by_name["chat claude-opus-4-6"]["start_time_unix_nano"] == base + 1_000_000_000


def test_grpc_round_trip_and_project_from_resource(phoenix: PhoenixServer) -> None:
    # Default project over gRPC.
    trace_b = 0x2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B
    sent_b = one_trace(trace_b, ns("2025-06-08T21:59:59.999Z"), "grpc")
    # A second trace in another project, chosen by the resource attribute.
    trace_c = 0x3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C
    project = "ccotel-grpc-project"
    resource_c = Resource.create({"service.name": "ccotel-test", "openinference.project.name": project})
    base_c = ns("2025-01-31T23:59:59.001Z")
    sent_c = [
        make_span("root c", trace_c, 0xC1, None, base_c, base_c + 2_000_000, resource=resource_c),
        make_span(
            "child c",
            trace_c,
            0xC2,
            0xC1,
            base_c + 1_000_000,
            base_c + 1_500_000,
            kind=SpanKind.CLIENT,
            resource=resource_c,
            status=Status(StatusCode.ERROR, "boom"),
            attributes={"n": 1},
        ),
    ]
    export(grpc_exporter(phoenix), sent_b + sent_c)

    got_b = phoenix.wait_for_spans(len(sent_b), trace_ids=[format(trace_b, "032x")], timeout=30)
    check_round_trip(sent_b, got_b)
    assert {g["project"] for g in got_b} == {"default"}

    got_c = phoenix.wait_for_spans(2, project, timeout=30, exact=True)
    by_name = {g["name"]: g for g in got_c}
    assert by_name["child c"]["parent_id"] == format(0xC1, "016x")
    assert by_name["child c"]["span_id"] == "00000000000000c2"
    assert by_name["child c"]["status_code"] == "ERROR"
    assert by_name["child c"]["status_message"] == "boom"
    assert by_name["root c"]["start_time_unix_nano"] == base_c
    assert by_name["child c"]["span_kind"] == "UNKNOWN"
    assert by_name["child c"]["attributes"] == {"n": 1}
    assert "openinference.project.name" not in by_name["root c"]["attributes"]
    assert project in phoenix.projects()
    assert phoenix.spans("default", trace_ids=[format(trace_c, "032x")]) == []


def test_resent_span_id_is_ignored_first_write_wins(phoenix: PhoenixServer) -> None:
    trace_id = 0x4D4D4D4D4D4D4D4D4D4D4D4D4D4D4D4D
    base = ns("2025-02-02T02:02:02.002Z")
    first = make_span("first version", trace_id, 0xD1, None, base, base + 1_000_000, attributes={"v": 1})
    export(http_exporter(phoenix), [first])
    phoenix.wait_for_spans(1, trace_ids=[format(trace_id, "032x")], timeout=30)

    changed = make_span(
        "second version", trace_id, 0xD1, None, base, base + 9_000_000,
        attributes={"v": 2}, status=Status(StatusCode.ERROR, "late"),
    )
    sentinel = make_span("sentinel", trace_id, 0xD2, 0xD1, base, base + 1_000_000)
    export(http_exporter(phoenix), [changed, sentinel])  # export reports success
    got = phoenix.wait_for_spans(2, trace_ids=[format(trace_id, "032x")], timeout=30)
    by_id = {g["span_id"]: g for g in got}
    assert len(got) == 2
    kept = by_id[format(0xD1, "016x")]
    assert kept["name"] == "first version"
    assert kept["attributes"] == {"v": 1}
    assert kept["end_time_unix_nano"] == base + 1_000_000
    assert kept["status_code"] == "UNSET"


def test_trace_stays_in_its_first_project(phoenix: PhoenixServer) -> None:
    trace_id = 0x6F6F6F6F6F6F6F6F6F6F6F6F6F6F6F6F
    base = ns("2025-07-07T07:07:07.007Z")

    def res(project: str) -> Resource:
        return Resource.create({"service.name": "ccotel-test", "openinference.project.name": project})

    export(http_exporter(phoenix),
           [make_span("p1 root", trace_id, 0xF1, None, base, base + 10, resource=res("ccotel-p1"))])
    phoenix.wait_for_spans(1, "ccotel-p1", timeout=30)
    export(http_exporter(phoenix),
           [make_span("p2 child", trace_id, 0xF2, 0xF1, base, base + 10, resource=res("ccotel-p2"))])
    got = phoenix.wait_for_spans(2, "ccotel-p1", timeout=30, exact=True)
    assert {g["name"] for g in got} == {"p1 root", "p2 child"}
    assert phoenix.spans("ccotel-p2") == []


def test_pagination_reads_every_span(phoenix: PhoenixServer) -> None:
    project = "ccotel-paging"
    resource = Resource.create({"service.name": "ccotel-test", "openinference.project.name": project})
    base = ns("2025-04-04T04:04:04.004Z")
    trace_id = 0x5E5E5E5E5E5E5E5E5E5E5E5E5E5E5E5E
    sent = [
        make_span(f"s{i:03d}", trace_id, 0x1000 + i, 0x1000 if i else None, base + i * 1_000_000,
                  base + i * 1_000_000 + 500_000, resource=resource, attributes={"i": i})
        for i in range(250)
    ]
    export(http_exporter(phoenix), sent)
    phoenix.wait_for_spans(250, project, timeout=60)
    got = phoenix.spans(project, page_size=100)  # 3 pages through next_cursor
    assert len(got) == 250
    assert len({g["span_id"] for g in got}) == 250
    assert sorted(g["attributes"]["i"] for g in got) == list(range(250))
    assert [g["name"] for g in got] == sorted(g["name"] for g in got)  # insertion order
    assert phoenix.spans(project, page_size=7)[-1]["name"] == "s249"


def test_unknown_project_reads_empty(phoenix: PhoenixServer) -> None:
    assert phoenix.spans("no-such-project") == []


def test_loopback_only(phoenix: PhoenixServer) -> None:
    sockets = phoenix.sockets()
    if not sockets:
        pytest.skip("`ss` not available to list Phoenix's sockets")
    listening = [s for s in sockets if s[0] == "LISTEN"]
    ports = {int(local.rsplit(":", 1)[1]) for _, local, _ in listening}
    assert {phoenix.http_port, phoenix.grpc_port} <= ports
    assert phoenix.non_loopback_sockets() == []
