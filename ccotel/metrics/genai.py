"""GenAI semantic-convention metrics over OTLP: what backends' AI views (token usage, latency,
tool and agent durations) read, built from the same spans ccotel counts for Prometheus.

Conventions: open-telemetry/semantic-conventions-genai as of e9de14ba (PR #571, 2026-11;
``docs/gen-ai/gen-ai-metrics.md``, ``client-inference.md``, ``gen-ai-token-metrics.md``). There:

- inference (chat) calls: ``gen_ai.client.inference.duration`` (s) and
  ``gen_ai.client.inference.time_to_first_chunk`` (s, streaming calls: 2.1.3xx records when the
  request was sent); ``gen_ai.client.operation.duration`` SHOULD NOT be reported for them any more.
- tokens: counters ``gen_ai.client.inference.usage.{input_tokens, output_tokens,
  cache_read.input_tokens, cache_write.input_tokens, reasoning.output_tokens}`` with
  ``gen_ai.token.modality`` (``unknown``: Anthropic does not split usage by modality), and the
  per-call histograms ``gen_ai.client.inference.operation.{input,output}_tokens``. They replace the
  ``gen_ai.client.token.usage`` histogram and its ``gen_ai.token.type`` (PR #374). Input counts
  fresh + cache read + cache write (the Anthropic rule of the span attribute); the cache and
  reasoning counters are subsets of input and output.
- ``gen_ai.execute_tool.duration`` (s) per tool call.
- ``gen_ai.invocation.duration`` (s) per agent invocation with ``gen_ai.invocation.is_nested``
  (false for the turn, true for a subagent); it replaced ``gen_ai.invoke_agent.duration`` (PR #571).

Unless ``OTEL_SEMCONV_STABILITY_OPT_IN`` has ``gen_ai_latest_experimental`` (as for the span
attributes, spans/build.py), the names the conventions replaced are sent too, since backends' AI views
still read them: ``gen_ai.client.token.usage`` (``gen_ai.token.type`` input/output, the only types
it defined), ``gen_ai.client.operation.duration`` for chat and ``gen_ai.invoke_agent.duration``.
Every histogram has the conventions' explicit bucket boundaries.

Attributes come from an allow-list: operation, provider, request/response model, error.type,
tool name and type, agent name, is_nested, token modality/type. Never session, conversation,
user, response or tool-call ids: each would make a series per session.

Counted as ccotel's Prometheus counters are (metrics/counters.py ``Metrics.observe_span``): once per span
when it is built, for events seen live. A span the trace queue let go is built again when the
traces catch up; ``expect_again`` names those so they are not recorded twice (Prometheus takes
its pending counts back instead; an OTLP instrument cannot). A restart starts new cumulative
series (a new start time), as any OTLP exporter's restart does.

Own MeterProvider, never the global one, and no atexit hook: the owner calls ``shutdown``.
Nothing is built (no thread, no socket) unless an OTLP metrics endpoint is configured.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ccotel import __version__
from ccotel.export.sinks import resource_attributes
from ccotel.export.transport import ConfigError, check_certificate, check_endpoint, parse_headers
from ccotel.records import SpanRecord, StatusCode
from ccotel.spans.attributes import (
    CLAUDE_CODE_ADVISOR,
    ERROR_TYPE,
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
)
from ccotel.spans.build import PROVIDER, Conventions

if TYPE_CHECKING:  # the SDK is imported when metrics are configured (else its memory and import time in every run)
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter

__all__ = [
    "CONVENTIONS_REVISION",
    "DURATION_BUCKETS",
    "INVOCATION_BUCKETS",
    "TOKEN_BUCKETS",
    "GenAIMetrics",
    "MetricsSettings",
    "metrics_settings",
]

log = logging.getLogger("ccotel.genai_metrics")

CONVENTIONS_REVISION = "open-telemetry/semantic-conventions-genai@e9de14ba"

# The conventions' ExplicitBucketBoundaries advice.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
INVOCATION_BUCKETS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

# usage counter -> the chat span attribute it adds up (spans/build.py _usage_attrs)
_USAGE_COUNTERS = (
    ("gen_ai.client.inference.usage.input_tokens", GEN_AI_USAGE_INPUT_TOKENS,
     "Input tokens used, cached ones included."),
    ("gen_ai.client.inference.usage.output_tokens", GEN_AI_USAGE_OUTPUT_TOKENS,
     "Output tokens used, reasoning ones included."),
    ("gen_ai.client.inference.usage.cache_read.input_tokens", GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
     "Input tokens served from the provider's cache."),
    ("gen_ai.client.inference.usage.cache_write.input_tokens", GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
     "Input tokens written to the provider's cache."),
    ("gen_ai.client.inference.usage.reasoning.output_tokens", GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
     "Output tokens used for reasoning (extended thinking)."),
)


@dataclass(frozen=True)
class MetricsSettings:
    """Where and how the metrics go, from the standard OTEL_* variables."""

    protocol: str  # grpc | http/protobuf
    endpoint: str
    headers: tuple[tuple[str, str], ...]
    timeout_s: float
    gzip: bool
    certificate: str | None
    interval_ms: float
    export_timeout_ms: float
    delta: bool  # OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE delta or lowmemory
    latest: bool  # only the names the conventions use now


def _var(env: Mapping[str, str], name: str) -> str | None:
    """The metrics-specific variable, else the general one (OTLP exporter spec)."""
    for key in (f"OTEL_EXPORTER_OTLP_METRICS_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = env.get(key, "").strip()
        if value:
            return value
    return None


def _millis(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):  # as the OpenTelemetry spec asks of a number it cannot use
        log.warning("ignoring %s=%r (milliseconds expected)", name, raw[:40])
        return default
    return value if value > 0 else default


def _metrics_endpoint(env: Mapping[str, str], protocol: str) -> str:
    """The metrics endpoint (checked: raises transport.ConfigError)."""
    specific = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if specific:
        endpoint = specific  # used as given (OTLP exporter spec)
    elif protocol == "grpc":
        endpoint = base or "http://localhost:4317"
    else:
        endpoint = (base.rstrip("/") + "/v1/metrics") if base else "http://localhost:4318/v1/metrics"
    check_endpoint(endpoint, protocol == "grpc", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" if specific
                   else "OTEL_EXPORTER_OTLP_ENDPOINT")
    return endpoint


def _metrics_headers(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    source = "OTEL_EXPORTER_OTLP_METRICS_HEADERS" if env.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "").strip() \
        else "OTEL_EXPORTER_OTLP_HEADERS"
    return parse_headers(_var(env, "HEADERS") or "", source)


def _metrics_certificate(env: Mapping[str, str]) -> str | None:
    path = _var(env, "CERTIFICATE")
    if path is not None:
        check_certificate(path, "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE" if env.get(
            "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "").strip() else "OTEL_EXPORTER_OTLP_CERTIFICATE")
    return path


def metrics_config_error(env: Mapping[str, str] | None = None) -> str | None:
    """Why the OTLP metrics configuration cannot work (as sinks.otlp_config_error for traces), or
    None; also None when no OTLP metrics are asked for."""
    env = os.environ if env is None else env
    if not _wanted(env):
        return None
    protocol = _var(env, "PROTOCOL") or "http/protobuf"
    try:
        _metrics_headers(env)
        _metrics_endpoint(env, protocol if protocol == "grpc" else "http/protobuf")
        _metrics_certificate(env)
    except ConfigError as exc:
        return str(exc)
    return None


def _wanted(env: Mapping[str, str]) -> bool:
    exporters = {v.strip().lower() for v in env.get("OTEL_METRICS_EXPORTER", "").split(",") if v.strip()}
    specific = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    return "none" not in exporters and bool(specific or "otlp" in exporters)


def metrics_settings(env: Mapping[str, str] | None = None) -> MetricsSettings | None:
    """None unless OTLP metrics are asked for: ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, or
    ``OTEL_METRICS_EXPORTER=otlp`` (with ``OTEL_EXPORTER_OTLP_ENDPOINT`` or the default
    localhost endpoint). ``OTEL_METRICS_EXPORTER=none`` turns them off whatever else is set."""
    env = os.environ if env is None else env
    if not _wanted(env):
        return None
    protocol = _var(env, "PROTOCOL") or "http/protobuf"
    if protocol not in ("grpc", "http/protobuf"):
        log.warning("unsupported OTLP metrics protocol %r, using http/protobuf", protocol)
        protocol = "http/protobuf"
    endpoint = _metrics_endpoint(env, protocol)
    temporality = (_var(env, "TEMPORALITY_PREFERENCE") or "cumulative").lower()
    return MetricsSettings(
        protocol=protocol,
        endpoint=endpoint,
        headers=_metrics_headers(env),
        timeout_s=max(_millis(env, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                              _millis(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000.0)) / 1000.0, 0.1),
        gzip=_var(env, "COMPRESSION") == "gzip",
        certificate=_metrics_certificate(env),
        interval_ms=_millis(env, "OTEL_METRIC_EXPORT_INTERVAL", 60_000.0),
        export_timeout_ms=_millis(env, "OTEL_METRIC_EXPORT_TIMEOUT", 30_000.0),
        delta=temporality in ("delta", "lowmemory"),
        latest=Conventions.from_env(dict(env)).latest,
    )


def _exporter(s: MetricsSettings) -> MetricExporter:
    from opentelemetry.sdk.metrics import Counter as SdkCounter
    from opentelemetry.sdk.metrics import Histogram as SdkHistogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    # Counters and histograms are all this module records: delta or lowmemory make both delta.
    temporality: dict[type, AggregationTemporality] | None = None
    if s.delta:
        temporality = {SdkCounter: AggregationTemporality.DELTA, SdkHistogram: AggregationTemporality.DELTA}
    if s.protocol == "grpc":
        import grpc  # only with grpc: the import is slow
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        return GrpcExporter(endpoint=s.endpoint, headers=dict(s.headers), timeout=s.timeout_s,
                            compression=grpc.Compression.Gzip if s.gzip else None,
                            preferred_temporality=temporality)
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

    return HttpExporter(endpoint=s.endpoint, headers=dict(s.headers), timeout=s.timeout_s,
                        compression=Compression.Gzip if s.gzip else Compression.NoCompression,
                        certificate_file=s.certificate, preferred_temporality=temporality)


# (name, unit, help, buckets) of each histogram, in the order GenAIMetrics keeps them.
_Histogram = tuple[str, str, str, Sequence[float]]
_HISTOGRAMS: tuple[_Histogram, ...] = (
    ("gen_ai.client.inference.operation.input_tokens", "{token}", "Input tokens per inference call.", TOKEN_BUCKETS),
    ("gen_ai.client.inference.operation.output_tokens", "{token}", "Output tokens per inference call.",
     TOKEN_BUCKETS),
    ("gen_ai.client.inference.duration", "s", "GenAI client inference operation duration.", DURATION_BUCKETS),
    ("gen_ai.client.inference.time_to_first_chunk", "s",
     "Time from sending the request to the first chunk of the streamed response.", DURATION_BUCKETS),
    ("gen_ai.execute_tool.duration", "s", "The duration of a single tool execution.", DURATION_BUCKETS),
    ("gen_ai.invocation.duration", "s", "End-to-end duration of a turn or subagent invocation.", INVOCATION_BUCKETS),
)
# The names the conventions replaced, sent too unless OTEL_SEMCONV_STABILITY_OPT_IN has gen_ai_latest_experimental.
_REPLACED_HISTOGRAMS: tuple[_Histogram, ...] = (
    ("gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS),
    ("gen_ai.client.operation.duration", "s", "GenAI operation duration.", DURATION_BUCKETS),
    ("gen_ai.invoke_agent.duration", "s", "End-to-end duration of a single agent invocation.", INVOCATION_BUCKETS),
)


class GenAIMetrics:
    """The GenAI metrics of the spans ccotel builds, exported by a MeterProvider of its own."""

    def __init__(self, settings: MetricsSettings, resource: Mapping[str, str],
                 exporter: MetricExporter | None = None) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        self.settings = settings
        self._expected: set[int] = set()  # span ids let go and counted, to skip once when rebuilt
        self._lock = threading.Lock()
        reader = PeriodicExportingMetricReader(exporter or _exporter(settings),
                                               export_interval_millis=settings.interval_ms,
                                               export_timeout_millis=settings.export_timeout_ms)
        # shutdown_on_exit=False: no atexit hook (global state); the owner calls shutdown()
        self._provider = MeterProvider(metric_readers=[reader], resource=Resource(dict(resource)),
                                       shutdown_on_exit=False)
        meter = self._provider.get_meter("ccotel", __version__, schema_url=None)
        tokens = "{token}"
        self._usage: list[tuple[Counter, str]] = [
            (meter.create_counter(name, tokens, help_), attr) for name, attr, help_ in _USAGE_COUNTERS]

        def histogram(spec: _Histogram) -> Histogram:
            name, unit, help_, buckets = spec
            return meter.create_histogram(name, unit, help_, explicit_bucket_boundaries_advisory=buckets)

        (self._op_input, self._op_output, self._inference, self._first_chunk, self._tool,
         self._invocation) = (histogram(spec) for spec in _HISTOGRAMS)
        self._legacy: tuple[Histogram, Histogram, Histogram] | None = None
        if not settings.latest:
            token_usage, operation, invoke_agent = (histogram(spec) for spec in _REPLACED_HISTOGRAMS)
            self._legacy = (token_usage, operation, invoke_agent)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GenAIMetrics | None:
        """None (nothing built, no thread) unless an OTLP metrics endpoint is configured."""
        env = os.environ if env is None else env
        settings = metrics_settings(env)
        if settings is None:
            return None
        return cls(settings, resource_attributes(dict(env)))

    def describe(self) -> str:
        return f"OTLP {self.settings.protocol} {self.settings.endpoint}"

    # -- recording ---------------------------------------------------------------

    def expect_again(self, span_ids: Iterable[int]) -> None:
        """These spans were observed and will be built again (the trace queue let them go and
        the traces catch up from the checkpoints): their next observation is not recorded."""
        with self._lock:
            self._expected.update(span_ids)

    def observe(self, span: SpanRecord) -> None:
        """Record what one span contributes: a chat call's tokens and durations, a tool call's
        duration, an agent invocation's duration. Other spans add nothing."""
        with self._lock:
            if span.span_id in self._expected:
                self._expected.discard(span.span_id)
                return
        op = span.attributes.get(GEN_AI_OPERATION_NAME)
        if op == "chat":
            self._chat(span)
        elif op == "execute_tool":
            self._execute_tool(span)
        elif op == "invoke_agent":
            self._invoke_agent(span)

    def _chat(self, s: SpanRecord) -> None:
        a = s.attributes
        attrs: dict[str, str] = {GEN_AI_OPERATION_NAME: "chat",
                                 GEN_AI_PROVIDER_NAME: str(a.get(GEN_AI_PROVIDER_NAME, PROVIDER))}
        for key in (GEN_AI_REQUEST_MODEL, GEN_AI_RESPONSE_MODEL):
            if a.get(key):
                attrs[key] = str(a[key])
        failed = s.status is StatusCode.ERROR
        if failed:
            attrs[ERROR_TYPE] = str(a.get(ERROR_TYPE) or "_OTHER")
        # An advisor's span copies the response's times: its own duration is not known.
        if not a.get(CLAUDE_CODE_ADVISOR):
            seconds = _seconds(s)
            self._inference.record(seconds, attrs)
            if self._legacy is not None:
                self._legacy[1].record(seconds, attrs)
            first = a.get(GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
            if first is not None and not failed:
                self._first_chunk.record(float(first), attrs)
        if failed or GEN_AI_USAGE_INPUT_TOKENS not in a:
            return  # a failed call's usage was never billed (spans/build.py writes none)
        by_modality = {**attrs, "gen_ai.token.modality": "unknown"}
        for counter, attr in self._usage:
            if attr in a:
                counter.add(int(a[attr]), by_modality)
        tokens_in, tokens_out = int(a[GEN_AI_USAGE_INPUT_TOKENS]), int(a.get(GEN_AI_USAGE_OUTPUT_TOKENS, 0))
        self._op_input.record(tokens_in, attrs)
        self._op_output.record(tokens_out, attrs)
        if self._legacy is not None:
            self._legacy[0].record(tokens_in, {**attrs, "gen_ai.token.type": "input"})
            self._legacy[0].record(tokens_out, {**attrs, "gen_ai.token.type": "output"})

    def _execute_tool(self, s: SpanRecord) -> None:
        a = s.attributes
        attrs = {GEN_AI_TOOL_NAME: str(a.get(GEN_AI_TOOL_NAME, "unknown"))}
        if a.get(GEN_AI_TOOL_TYPE):
            attrs[GEN_AI_TOOL_TYPE] = str(a[GEN_AI_TOOL_TYPE])
        if s.status is StatusCode.ERROR:
            attrs[ERROR_TYPE] = str(a.get(ERROR_TYPE) or "_OTHER")
        self._tool.record(_seconds(s), attrs)

    def _invoke_agent(self, s: SpanRecord) -> None:
        a = s.attributes
        attrs: dict[str, Any] = {GEN_AI_OPERATION_NAME: "invoke_agent"}
        if a.get(GEN_AI_AGENT_NAME):
            attrs[GEN_AI_AGENT_NAME] = str(a[GEN_AI_AGENT_NAME])
        if s.status is StatusCode.ERROR:
            # turn outcomes (orphaned, interrupted, killed) and interrupted subagents: few values
            attrs[ERROR_TYPE] = s.status_message or "_OTHER"
        seconds = _seconds(s)
        if self._legacy is not None:
            self._legacy[2].record(seconds, attrs)
        # the turn (no parent) is the root invocation; a subagent runs inside it
        self._invocation.record(seconds, {**attrs, "gen_ai.invocation.is_nested": s.parent_span_id is not None})

    # -- lifecycle ---------------------------------------------------------------

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Export what was recorded now (tests; a final flush is part of shutdown)."""
        return self._provider.force_flush(timeout_millis=timeout_s * 1000.0)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Export what was recorded since the last export and stop the export thread."""
        self._provider.shutdown(timeout_millis=timeout_s * 1000.0)


def _seconds(s: SpanRecord) -> float:
    return max(s.end_ns - s.start_ns, 0) / 1e9
