"""The trace backend check: the OTLP endpoint and protocol resolved as ccotel run resolves them
(export/sinks.py), whether it accepts connections, and what it answers an empty export (no span
is sent). The telemetry check compares Claude Code's endpoint with ccotel's by the same rules.
"""

from __future__ import annotations

import dataclasses
import socket
import urllib.parse
from collections.abc import Mapping

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, Level
from ccotel.export.result import REASON_THROTTLED, ExportResult, Outcome
from ccotel.export.sinks import OtlpSettings, otlp_config_error, otlp_settings
from ccotel.export.transport import HttpTransport

__all__ = ["check_traces", "supported_protocol", "endpoint_address"]

_BACKEND_FIX = ("start the backend, or point ccotel at one: OTEL_EXPORTER_OTLP_ENDPOINT (base URL) or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (full URL), OTEL_EXPORTER_OTLP_PROTOCOL=grpc|http/protobuf; "
                "for metrics only, --traces-exporter none. Meanwhile ccotel run keeps up to 20,000 spans and "
                "sends them once it answers")


def check_traces(cfg: DoctorConfig) -> list[Finding]:
    if cfg.traces_exporter != "otlp":
        return [Finding("traces", Level.OK, f"--traces-exporter {cfg.traces_exporter}",
                        "spans go to no backend" if cfg.traces_exporter == "none" else "spans are printed on stdout")]
    env, out = supported_protocol(cfg.env)
    problem = otlp_config_error(env)
    if problem is not None:  # ccotel run, backfill and relay refuse to start (the message names no value)
        return [*out, Finding("traces", Level.FAIL, "OTLP settings", f"{problem}: ccotel run, backfill and relay "
                              "refuse to start (exit 2)", "fix the variable named: a header value percent-encoded "
                              "(a space is %20) and without a line break, an http(s) endpoint URL, a CA file "
                              "that can be read")]
    settings = otlp_settings(env)
    subject = f"{settings.endpoint} ({settings.protocol})"
    try:
        host, port = endpoint_address(settings)
    except ValueError as exc:
        return [*out, Finding("traces", Level.FAIL, subject, f"not an endpoint ccotel can use ({exc})", _BACKEND_FIX)]
    try:
        with socket.create_connection((host, port), timeout=cfg.timeout_s):
            pass
    except OSError as exc:
        return [*out, Finding("traces", Level.FAIL, subject, f"nothing accepts connections on {host}:{port} "
                              f"({exc.strerror or exc}): spans cannot be delivered", _BACKEND_FIX,
                              {"endpoint": settings.endpoint, "protocol": settings.protocol})]
    result = _empty_export(settings, cfg.timeout_s)
    data = {"endpoint": settings.endpoint, "protocol": settings.protocol, "outcome": result.outcome.value,
            "answer": result.message}
    if result.outcome is Outcome.OK:
        return [*out, Finding("traces", Level.OK, subject, "reachable: it accepted an empty export", "", data)]
    level = Level.WARN if result.reason == REASON_THROTTLED else Level.FAIL
    return [*out, Finding("traces", level, subject, f"reachable, but it refused an empty export: {result.message}",
                          _answer_fix(settings, result), data)]


def supported_protocol(env: Mapping[str, str]) -> tuple[dict[str, str], list[Finding]]:
    """ccotel speaks grpc and http/protobuf; anything else falls back to http/protobuf (export/sinks.py)."""
    out = dict(env)
    findings = []
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = out.get(name, "").strip()
        if value and value not in ("grpc", "http/protobuf"):
            findings.append(Finding("traces", Level.WARN, f"{name}={value}", "a protocol ccotel does not speak: "
                                    "it sends http/protobuf instead", f"set {name}=http/protobuf or grpc, as the "
                                    "backend expects"))
            out[name] = "http/protobuf"
    return out, findings


def endpoint_address(settings: OtlpSettings) -> tuple[str, int]:
    ep = settings.endpoint
    url = urllib.parse.urlsplit(ep if "://" in ep else f"http://{ep}")
    if url.scheme not in ("http", "https"):
        raise ValueError(f"scheme {url.scheme!r}")
    default = 443 if url.scheme == "https" else 4317 if settings.protocol == "grpc" else 80
    return url.hostname or "localhost", url.port or default  # .port raises ValueError on a bad one


def _empty_export(settings: OtlpSettings, timeout_s: float) -> ExportResult:
    """Send an empty ExportTraceServiceRequest (zero bytes in protobuf) the way ccotel sends spans."""
    config = dataclasses.replace(settings.transport, timeout_s=timeout_s)
    if settings.protocol == "grpc":
        try:
            from ccotel.export.transport import GrpcTransport

            transport: HttpTransport | GrpcTransport = GrpcTransport(config)
        except (ImportError, OSError) as exc:
            return ExportResult.retry("connection", f"cannot set up gRPC: {exc}")
    else:
        transport = HttpTransport(config)
    try:
        return transport.send(b"", 0)
    finally:
        transport.close()


def _answer_fix(settings: OtlpSettings, result: ExportResult) -> str:
    text = result.message
    if "HTTP 404" in text or "UNIMPLEMENTED" in text:
        if settings.protocol == "grpc":
            return ("this is not an OTLP/gRPC trace service: check the port (4317 is the usual OTLP/gRPC one) or "
                    "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf if it speaks HTTP")
        return ("wrong path: OTLP/HTTP traces go to /v1/traces. OTEL_EXPORTER_OTLP_ENDPOINT is the base URL (ccotel "
                "adds /v1/traces), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT the full URL")
    if "HTTP 401" in text or "HTTP 403" in text or "UNAUTHENTICATED" in text or "PERMISSION_DENIED" in text:
        return "the backend wants credentials: OTEL_EXPORTER_OTLP_HEADERS=\"Authorization=Bearer <token>\""
    if "HTTP 415" in text or "HTTP 400" in text:
        return ("it does not take OTLP protobuf here: check the endpoint, or OTEL_EXPORTER_OTLP_PROTOCOL=grpc if "
                "the port speaks gRPC")
    if "SSL" in text or "certificate" in text.lower():
        return "TLS failed: OTEL_EXPORTER_OTLP_CERTIFICATE=<CA file>, or http:// if the backend has no TLS"
    if result.reason == REASON_THROTTLED:
        return "the backend is throttling: ccotel waits as long as it asks; nothing to do unless it lasts"
    return _BACKEND_FIX
