"""Claude Code's own telemetry, as its environment and settings files turn it on for each root:
the Prometheus port it would take (which the metrics check holds against ccotel's) and traces it
would send to the backend ccotel sends to.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, Level
from ccotel.commands.doctor.metrics import CLAUDE_CODE_PROMETHEUS_PORT, is_loopback
from ccotel.commands.doctor.traces import endpoint_address, supported_protocol
from ccotel.commands.doctor.wording import why
from ccotel.export.sinks import OtlpSettings, otlp_settings
from ccotel.read.discover import within_root
from ccotel.read.regular import open_regular
from ccotel.records import BadInput

__all__ = ["check_claude_code_telemetry", "TELEMETRY_KEYS"]

_SETTINGS_MAX = 1 << 20  # a settings file is a few KB; more than this is read no further (and is no JSON then)
TELEMETRY_KEYS = ("CLAUDE_CODE_ENABLE_TELEMETRY", "OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER",
                  "OTEL_EXPORTER_PROMETHEUS_PORT", "OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_OTLP_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")


@dataclass(frozen=True)
class _EnvSource:
    name: str  # "the environment" or a settings file
    env: Mapping[str, str]


def check_claude_code_telemetry(cfg: DoctorConfig) -> tuple[list[Finding], dict[int, list[str]]]:
    """Claude Code's telemetry as its settings would set it for each root: the environment, then
    the root's settings.json and settings.local.json ``env``, then the managed settings (which win).
    Returns the findings and the ports its Prometheus exporter would take, with where that is set."""
    findings: list[Finding] = []
    managed, bad = _settings_env(cfg.managed_settings)
    findings += bad
    ports: dict[int, list[str]] = defaultdict(list)
    said: set[str] = set()
    enabled = False
    environment = _EnvSource("the environment", {k: v for k, v in cfg.env.items() if k in TELEMETRY_KEYS})
    for root in cfg.roots:
        sources = [environment]
        for name in ("settings.json", "settings.local.json"):
            found, bad = _settings_env(os.path.join(root, name), root)
            findings += bad
            sources += found
        sources += managed
        merged: dict[str, tuple[str, str]] = {}  # key -> (value, where)
        for source in sources:
            for key, value in source.env.items():
                merged[key] = (value, source.name)
        on = merged.get("CLAUDE_CODE_ENABLE_TELEMETRY")
        if on is None or not _truthy(on[0]):
            continue
        enabled = True
        for finding in _telemetry_findings(cfg, root, merged, ports):
            if finding.message not in said:  # the environment and managed settings apply to every root
                said.add(finding.message)
                findings.append(finding)
    if not enabled:
        findings.append(Finding("telemetry", Level.OK, "Claude Code", "its own telemetry is off (no "
                                "CLAUDE_CODE_ENABLE_TELEMETRY in the environment, the roots' settings or managed "
                                "settings): no port or backend shared with ccotel"))
    return findings, {port: sorted(set(where)) for port, where in ports.items()}


def _settings_env(path: str, root: str | None = None) -> tuple[list[_EnvSource], list[Finding]]:
    """The telemetry keys of a settings file's ``env``; a root's own file only if it resolves
    inside the root (a symlink out of it is not read, as ccotel reads nothing outside its roots)."""
    if root is not None and not within_root(root, path):
        return [], [Finding("telemetry", Level.WARN, path,
                            f"{BadInput.PATH_OUTSIDE_ROOT}: resolves outside the root {root}, "
                            "so it is not read: Claude Code's telemetry settings there are not known to doctor",
                            "make it a file inside the root")]
    try:
        with open_regular(path) as f:  # (a FIFO there must not hold doctor up)
            doc = orjson.loads(f.read(_SETTINGS_MAX))
    except FileNotFoundError:
        return [], []
    except (OSError, orjson.JSONDecodeError) as exc:
        reason = why(exc) if isinstance(exc, OSError) else f"not JSON: {exc}"
        return [], [Finding("telemetry", Level.WARN, path, f"cannot be read ({reason}): Claude Code's telemetry "
                            "settings there are not known to doctor", "")]
    env = doc.get("env") if isinstance(doc, dict) else None
    if not isinstance(env, dict):
        return [], []
    return [_EnvSource(path, {k: str(v) for k, v in env.items() if k in TELEMETRY_KEYS})], []


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _telemetry_findings(cfg: DoctorConfig, root: str, merged: Mapping[str, tuple[str, str]],
                        ports: dict[int, list[str]]) -> list[Finding]:
    """Claude Code's telemetry is on for ``root`` (merged: key -> (value, where it is set))."""
    env = {k: v for k, (v, _) in merged.items()}
    out = [Finding("telemetry", Level.OK, "Claude Code", f"its own telemetry is on for {root} "
                   f"(CLAUDE_CODE_ENABLE_TELEMETRY from {merged['CLAUDE_CODE_ENABLE_TELEMETRY'][1]})", "",
                   {"root": root, "set_in": {k: where for k, (_, where) in merged.items()}})]
    metrics = [m.strip() for m in env.get("OTEL_METRICS_EXPORTER", "").split(",")]
    if "prometheus" in metrics:
        try:
            port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or CLAUDE_CODE_PROMETHEUS_PORT)
        except ValueError:
            port = CLAUDE_CODE_PROMETHEUS_PORT
        where = merged["OTEL_METRICS_EXPORTER"][1]
        ports[port].append(where)
        out.append(Finding("telemetry", Level.OK, "Claude Code", f"serves its own Prometheus metrics on port {port} "
                           f"(OTEL_METRICS_EXPORTER=prometheus from {where})", "", {"port": port}))
    traces = [t.strip() for t in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    if "otlp" in traces and cfg.traces_exporter == "otlp":
        # only the endpoints are compared: headers either side cannot parse are left out (the
        # traces check reports ccotel's own), never shown
        theirs = otlp_settings(_without_headers(supported_protocol(env)[0]))
        ours = otlp_settings(_without_headers(supported_protocol(cfg.env)[0]))
        if _same_backend(theirs, ours):
            out.append(Finding("telemetry", Level.WARN, ours.endpoint, "Claude Code sends its own traces to the "
                               f"backend ccotel sends to (OTEL_TRACES_EXPORTER=otlp from "
                               f"{merged['OTEL_TRACES_EXPORTER'][1]}): each turn is there twice, as Claude Code's "
                               "spans and as ccotel's, with different ids",
                               "keep one: unset OTEL_TRACES_EXPORTER for Claude Code, or tell them apart by "
                               "service.name (ccotel's is \"ccotel\")", {"claude_code": theirs.endpoint}))
    return out


def _without_headers(env: Mapping[str, str]) -> dict[str, str]:
    headers = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
    return {k: v for k, v in env.items() if k not in headers}


def _same_backend(a: OtlpSettings, b: OtlpSettings) -> bool:
    try:
        (ha, pa), (hb, pb) = endpoint_address(a), endpoint_address(b)
    except ValueError:
        return False
    return pa == pb and (ha == hb or _is_local(ha) and _is_local(hb))


def _is_local(host: str) -> bool:
    return is_loopback(host) or host in ("0.0.0.0", "::")
