"""GenAI semantic-convention metrics over OTLP (ccotel/genai_metrics.py), decoded by a real
OTLP receiver on 127.0.0.1 (tests/support/otlp.py, HTTP and gRPC).

The spans are built by the real pipeline from the committed real-CLI fixtures of both Claude Code
versions; the decoded token sums per model and type must equal the chat spans' attributes and
the fake API's ground truth (what it really sent, advisor calls under the advisor's model), the
histogram counts the span counts, and no point may carry an id of a session, user, response or
tool call. Unconfigured, nothing is built: no thread, no request.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccotel.metrics.counters import Metrics
from ccotel.metrics.genai import (
    DURATION_BUCKETS,
    INVOCATION_BUCKETS,
    TOKEN_BUCKETS,
    GenAIMetrics,
    metrics_settings,
)
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.otlp import OtlpReceiver, Point

ALLOWED = {"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
           "error.type", "gen_ai.token.modality", "gen_ai.token.type", "gen_ai.tool.name", "gen_ai.tool.type",
           "gen_ai.agent.name", "gen_ai.invocation.is_nested"}
# usage counter -> ground-truth usage keys it adds up (input counts fresh + cache read + cache write)
TRUTH = {
    "gen_ai.client.inference.usage.input_tokens": ("input_tokens", "cache_read_input_tokens",
                                                   "cache_creation_input_tokens"),
    "gen_ai.client.inference.usage.output_tokens": ("output_tokens",),
    "gen_ai.client.inference.usage.cache_read.input_tokens": ("cache_read_input_tokens",),
    "gen_ai.client.inference.usage.cache_write.input_tokens": ("cache_creation_input_tokens",),
}
SPAN_ATTR = {
    "gen_ai.client.inference.usage.input_tokens": "gen_ai.usage.input_tokens",
    "gen_ai.client.inference.usage.output_tokens": "gen_ai.usage.output_tokens",
    "gen_ai.client.inference.usage.cache_read.input_tokens": "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.client.inference.usage.cache_write.input_tokens": "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.client.inference.usage.reasoning.output_tokens": "gen_ai.usage.reasoning.output_tokens",
}


def fixture_spans(name: str) -> list[SpanRecord]:
    """Every span the real pipeline builds from a fixture (read-only: no state, nothing written)."""
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(str(load_fixture(name).config_dir),)), emit=spans.extend, state=None).backfill(
        close_all=True)
    return spans


def truth_by_model(name: str) -> dict[tuple[str, str], int]:
    """(model, usage counter) -> tokens the fake API sent, each advisor call under its own model."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for r in load_fixture(name).ground_truth:
        if not (r.get("endpoint") == "messages" and r.get("matched") and r.get("status") == 200
                and r.get("expect_in_transcript", True)):
            continue
        advisors = [(it["model"], it) for it in r.get("iterations") or [] if it.get("type") == "advisor_message"]
        for model, usage in [(r["model"], r["usage"]), *advisors]:
            for metric, keys in TRUTH.items():
                out[model, metric] += sum(usage[k] for k in keys)
    return dict(out)


def export(spans: list[SpanRecord], protocol: str = "http/protobuf", **env: str) -> list[Point]:
    """Observe the spans with a GenAIMetrics built from the environment, shut it down (the final
    flush) and return what the receiver decoded."""
    with OtlpReceiver(signal="metrics", protocol=protocol) as receiver:
        gm = GenAIMetrics.from_env({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.endpoint,
                                    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": protocol, **env})
        assert gm is not None
        for s in spans:
            gm.observe(s)
        gm.shutdown(timeout_s=5.0)
        return latest(receiver)


def latest(receiver: OtlpReceiver) -> list[Point]:
    return list(receiver.latest().values())


def total(points: list[Point], metric: str, **attrs: Any) -> float:
    return sum(p.value for p in points if p.metric == metric and all(p.attributes.get(k) == v
                                                                      for k, v in attrs.items()))


def count(points: list[Point], metric: str, **attrs: Any) -> int:
    return sum(p.count for p in points if p.metric == metric and all(p.attributes.get(k) == v
                                                                     for k, v in attrs.items()))


def op(s: SpanRecord) -> str | None:
    return s.attributes.get("gen_ai.operation.name")


def billed(s: SpanRecord) -> bool:
    return op(s) == "chat" and s.status is not StatusCode.ERROR and "gen_ai.usage.input_tokens" in s.attributes


@pytest.mark.parametrize("name", list_fixtures())
def test_fixture_metrics_equal_spans_and_ground_truth(name):
    spans = fixture_spans(name)
    points = export(spans)
    chats = [s for s in spans if billed(s)]
    assert chats, "every fixture has at least one answered API call"
    models = {s.attributes["gen_ai.response.model"] for s in chats}

    # token counters: per model and type, equal to the chat spans and to what the API sent
    truth = truth_by_model(name)
    assert {m for m, _ in truth} == models
    for model in models:
        mine = [s for s in chats if s.attributes["gen_ai.response.model"] == model]
        for metric, attr in SPAN_ATTR.items():
            got = total(points, metric, **{"gen_ai.response.model": model})
            assert got == sum(s.attributes.get(attr, 0) for s in mine), (model, metric)
            if metric in TRUTH:
                assert got == truth[model, metric], (model, metric)
        # per-call histograms and the legacy token.usage: one point per answered call and type
        for metric, attr in (("gen_ai.client.inference.operation.input_tokens", "gen_ai.usage.input_tokens"),
                             ("gen_ai.client.inference.operation.output_tokens", "gen_ai.usage.output_tokens")):
            assert count(points, metric, **{"gen_ai.response.model": model}) == len(mine)
            assert total(points, metric, **{"gen_ai.response.model": model}) == sum(
                s.attributes[attr] for s in mine)
        for kind, metric in (("input", "gen_ai.client.inference.usage.input_tokens"),
                             ("output", "gen_ai.client.inference.usage.output_tokens")):
            legacy = {"gen_ai.response.model": model, "gen_ai.token.type": kind}
            assert count(points, "gen_ai.client.token.usage", **legacy) == len(mine)
            assert total(points, "gen_ai.client.token.usage", **legacy) == truth[model, metric]

    # durations: one point per span, the span's duration
    timed = [s for s in spans if op(s) == "chat" and not s.attributes.get("claude_code.advisor")]
    for metric in ("gen_ai.client.inference.duration", "gen_ai.client.operation.duration"):
        assert count(points, metric) == len(timed)
        assert total(points, metric) == pytest.approx(sum((s.end_ns - s.start_ns) / 1e9 for s in timed))
    failed = Counter(str(s.attributes.get("error.type")) for s in timed if s.status is StatusCode.ERROR)
    for error, n in failed.items():
        assert count(points, "gen_ai.client.inference.duration", **{"error.type": error}) == n
    assert count(points, "gen_ai.client.inference.time_to_first_chunk") == sum(
        1 for s in timed if "gen_ai.response.time_to_first_chunk" in s.attributes and s.status is not StatusCode.ERROR)
    tools = [s for s in spans if op(s) == "execute_tool"]
    for (tool, error), n in Counter((s.attributes["gen_ai.tool.name"], s.attributes.get("error.type"))
                                    for s in tools).items():
        labels = {"gen_ai.tool.name": tool} | ({"error.type": error} if error else {})
        got = [p for p in points if p.metric == "gen_ai.execute_tool.duration" and p.attributes == {
            **labels, "gen_ai.tool.type": "function"}]
        assert sum(p.count for p in got) == n, (tool, error)
    assert count(points, "gen_ai.execute_tool.duration") == len(tools)
    agents = [s for s in spans if op(s) == "invoke_agent"]
    for nested in (False, True):
        n = sum(1 for s in agents if (s.parent_span_id is not None) is nested)
        assert count(points, "gen_ai.invocation.duration", **{"gen_ai.invocation.is_nested": nested}) == n
    assert count(points, "gen_ai.invoke_agent.duration") == len(agents) > 0

    # the conventions' buckets; no id of a session, user, response or tool call anywhere
    bounds = {p.metric: p.bounds for p in points if p.kind == "histogram"}
    assert bounds["gen_ai.client.inference.duration"] == DURATION_BUCKETS
    assert bounds["gen_ai.client.inference.operation.input_tokens"] == tuple(float(b) for b in TOKEN_BUCKETS)
    assert bounds["gen_ai.invocation.duration"] == INVOCATION_BUCKETS
    ids = {str(v) for s in spans for k, v in s.attributes.items()
           if k in ("session.id", "gen_ai.conversation.id", "gen_ai.response.id", "gen_ai.tool.call.id",
                    "claude_code.agent_id", "claude_code.request_id", "claude_code.uuid")}
    for p in points:
        assert set(p.attributes) <= ALLOWED, p
        assert not {str(v) for v in p.attributes.values()} & ids, p
        assert p.resource["service.name"] == "ccotel" and p.scope == "ccotel"


def test_grpc_receives_what_http_receives():
    spans = fixture_spans("2.1.330-s13_advisor")  # two models, an advisor call, a tool, time to first chunk
    by_http = {(p.metric, tuple(sorted(p.attributes.items()))): (p.value, p.count) for p in export(spans)}
    by_grpc = {(p.metric, tuple(sorted(p.attributes.items()))): (p.value, p.count)
               for p in export(spans, "grpc")}
    assert by_grpc == by_http
    assert len(by_http) >= 20


def test_latest_conventions_only_drop_the_replaced_names():
    spans = fixture_spans("s03_parallel_subagents")
    names = {p.metric for p in export(spans, OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental")}
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration", "gen_ai.invoke_agent.duration"} \
        .isdisjoint(names)
    assert {"gen_ai.client.inference.usage.input_tokens", "gen_ai.client.inference.duration",
            "gen_ai.execute_tool.duration", "gen_ai.invocation.duration"} <= names


def test_periodic_delta_export_adds_up_to_the_totals():
    """OTEL_METRIC_EXPORT_INTERVAL drives the SDK's export thread (no flush called); with delta
    temporality every point is a new increment, and they add up to the spans' totals."""
    spans = fixture_spans("2.1.330-s03_parallel_subagents")
    chats = [s for s in spans if billed(s)]
    half = len(spans) // 2
    with OtlpReceiver(signal="metrics") as receiver:
        gm = GenAIMetrics.from_env({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.endpoint,
                                    "OTEL_METRIC_EXPORT_INTERVAL": "100",
                                    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"})
        assert gm is not None
        for s in spans[:half]:
            gm.observe(s)
        assert receiver.wait_requests(1, timeout_s=10.0) >= 1, "nothing exported within 10 s at a 100 ms interval"
        for s in spans[half:]:
            gm.observe(s)
        gm.shutdown(timeout_s=5.0)
        points = receiver.points
        summed = receiver.summed()
    assert {p.temporality for p in points} == {"delta"}
    assert len(receiver.requests) >= 2
    tokens = sum(v for (metric, _), (v, _) in summed.items()
                 if metric == "gen_ai.client.inference.usage.output_tokens")
    assert tokens == sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats)
    assert sum(n for (metric, _), (_, n) in summed.items() if metric == "gen_ai.invocation.duration") == sum(
        1 for s in spans if op(s) == "invoke_agent")


def test_spans_built_again_are_recorded_once():
    """The trace queue let spans go (the backend was away); when the traces catch up they are
    built again from the transcript with the same ids. expect_again makes that second build
    record nothing, a third (a new event with that id cannot happen) would."""
    spans = fixture_spans("s05_nested_subagent")
    chats = [s for s in spans if billed(s)]
    once = export(spans)
    with OtlpReceiver(signal="metrics") as receiver:
        gm = GenAIMetrics.from_env({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.endpoint})
        assert gm is not None
        for s in spans:
            gm.observe(s)
        gm.expect_again(s.span_id for s in spans)
        for s in spans:  # the catch-up builds them again
            gm.observe(s)
        gm.shutdown(timeout_s=5.0)
        again = latest(receiver)
    key = {(p.metric, tuple(sorted(p.attributes.items()))): (p.value, p.count) for p in once}
    assert {(p.metric, tuple(sorted(p.attributes.items()))): (p.value, p.count) for p in again} == key
    assert total(again, "gen_ai.client.inference.usage.input_tokens") == sum(
        s.attributes["gen_ai.usage.input_tokens"] for s in chats)


def test_counts_what_prometheus_counts_live_not_history(tmp_path):
    """Counted where the Prometheus counters are (Metrics.observe_span with ``genai``, as
    ``ccotel run`` wires it): history read before ccotel caught up is not recorded; a fixture
    appearing live is, and its tokens equal ccotel_tokens_total."""
    root = tmp_path / "claude"
    shutil.copytree(load_fixture("s01_bash_tool").config_dir / "projects", root / "projects")  # history
    now = [time.time_ns()]
    with OtlpReceiver(signal="metrics") as receiver:
        gm = GenAIMetrics.from_env({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.endpoint})
        assert gm is not None
        metrics = Metrics(genai=gm)
        holder: list[Pipeline] = []
        p = Pipeline(Options(roots=(str(root),)), emit=lambda spans: holder[0].acknowledge(spans),
                     clock=lambda: now[0], state=State(str(tmp_path / "st")), metrics=metrics)
        holder.append(p)
        p.backfill()
        live = "2.1.330-s03_parallel_subagents"
        shutil.copytree(load_fixture(live).config_dir / "projects", root / "projects", dirs_exist_ok=True)
        p.rescan()
        now[0] += 3600 * 10**9
        p.tick()
        gm.shutdown(timeout_s=5.0)
        points = latest(receiver)
    truth = truth_by_model(live)
    models = {m for m, _ in truth}
    assert {p.attributes.get("gen_ai.response.model") for p in points
            if p.metric.startswith("gen_ai.client.inference.usage.")} == models
    for model in models:
        def prom(kind: str, model: str = model) -> float:
            return metrics.value("ccotel_tokens", model, kind)

        def otlp(metric: str, model: str = model) -> float:
            return total(points, metric, **{"gen_ai.response.model": model})

        assert otlp("gen_ai.client.inference.usage.input_tokens") == \
            prom("input") + prom("cache_read") + prom("cache_creation") == \
            truth[model, "gen_ai.client.inference.usage.input_tokens"]
        assert otlp("gen_ai.client.inference.usage.output_tokens") == prom("output")
        assert otlp("gen_ai.client.inference.usage.cache_read.input_tokens") == prom("cache_read")
        assert otlp("gen_ai.client.inference.usage.cache_write.input_tokens") == prom("cache_creation")
        assert count(points, "gen_ai.client.inference.operation.input_tokens",
                     **{"gen_ai.response.model": model}) == metrics.value("ccotel_api_calls", model)
    assert count(points, "gen_ai.execute_tool.duration", **{"gen_ai.tool.name": "Bash"}) == \
        metrics.value("ccotel_tool_duration_seconds_count", "Bash") == 2


@pytest.fixture
def listening() -> Iterator[OtlpReceiver]:
    with OtlpReceiver(signal="metrics") as receiver:
        yield receiver


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "{base}"},  # traces only: metrics are asked for explicitly
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "{base}", "OTEL_METRICS_EXPORTER": "none"},
    {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "{endpoint}", "OTEL_METRICS_EXPORTER": "none"},
    {"OTEL_METRICS_EXPORTER": "prometheus"},
])
def test_unconfigured_builds_nothing_and_sends_nothing(listening, env):
    base = listening.endpoint.rsplit("/v1/metrics", 1)[0]
    env = {k: v.format(base=base, endpoint=listening.endpoint) for k, v in env.items()}
    threads = {t.ident for t in threading.enumerate()}
    assert GenAIMetrics.from_env(env) is None
    assert metrics_settings(env) is None
    time.sleep(0.3)
    assert {t.ident for t in threading.enumerate()} - threads == set()
    assert listening.requests == []


def test_configured_starts_one_export_thread_and_shutdown_stops_it(listening):
    threads = set(threading.enumerate())
    gm = GenAIMetrics.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": listening.endpoint.rsplit("/v1/metrics", 1)[0],
                                "OTEL_METRICS_EXPORTER": "otlp"})
    assert gm is not None and gm.describe() == f"OTLP http/protobuf {listening.endpoint}"
    started = set(threading.enumerate()) - threads
    assert len(started) == 1
    gm.shutdown(timeout_s=5.0)
    started.pop().join(timeout=5.0)
    assert set(threading.enumerate()) - threads == set()


def test_settings_from_the_standard_variables(tmp_path: Path):
    s = metrics_settings({"OTEL_METRICS_EXPORTER": "otlp"})
    assert s is not None and (s.protocol, s.endpoint) == ("http/protobuf", "http://localhost:4318/v1/metrics")
    s = metrics_settings({"OTEL_METRICS_EXPORTER": "console,otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/",
                          "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
                          "OTEL_METRIC_EXPORT_INTERVAL": "15000", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"})
    assert s is not None
    assert (s.endpoint, s.headers, s.gzip, s.interval_ms, s.timeout_s, s.delta, s.latest) == (
        "http://c:4318/v1/metrics", (("api-key", "a b"),), True, 15000.0, 2.5, False, False)
    s = metrics_settings({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                          "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                          "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "lowmemory"})
    assert s is not None and (s.protocol, s.endpoint, s.delta) == ("grpc", "http://c:4317", True)
    s = metrics_settings({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://m.example/otlp/metrics",
                          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318", "OTEL_METRIC_EXPORT_INTERVAL": "x"})
    assert s is not None and (s.endpoint, s.interval_ms) == ("https://m.example/otlp/metrics", 60000.0)
