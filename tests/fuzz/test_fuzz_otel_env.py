"""The ``OTEL_*`` variables as an input surface (export/sinks.py for traces, metrics/genai.py for
the GenAI metrics; cli._otlp_config_error checks both before any work): any values either give an
exporter that can form its requests, or a configuration error (exit 2) whose message names the
variable and never holds a header's value; never another exception. Nothing is sent anywhere: the
exporters are built and their first request formed, no more. The crashes found are kept as
explicit examples."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ccotel.cli import otlp_problem
from ccotel.export.sinks import OtlpSink
from ccotel.export.transport import GrpcTransport, HttpTransport
from ccotel.metrics.genai import metrics_settings

SETTINGS: dict[str, Any] = dict(deadline=None, derandomize=True, database=None, max_examples=400,
                                phases=[Phase.explicit, Phase.generate],
                                suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[2]

SECRET = "s3cr3tVALUE"
_KEYS = ("ENDPOINT", "HEADERS", "TIMEOUT", "PROTOCOL", "COMPRESSION", "INSECURE", "CERTIFICATE")
_NAMES = ([f"OTEL_EXPORTER_OTLP_{k}" for k in _KEYS] + [f"OTEL_EXPORTER_OTLP_TRACES_{k}" for k in _KEYS]
          + [f"OTEL_EXPORTER_OTLP_METRICS_{k}" for k in _KEYS]
          + ["OTEL_METRICS_EXPORTER", "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
             "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"])

_value = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["http://127.0.0.1:4318", "https://collector:4318/v1/traces", "127.0.0.1:4317", "grpc",
                     "http/protobuf", "http/json", "gzip", "true", "false", "otlp", "none", "delta", "nan", "inf",
                     "-inf", "1e400", "-5", "0", "5000", "http://[::1", "http://h:99999", "http://h:abc/",
                     "ftp://h/x", "http://", "http:///v1", "http://h/a b", "http://u:p@h:1/x", "/nonexistent/ca.pem",
                     f"x-api-key={SECRET}", f"x-api-key={SECRET}%0D%0AX:%20y", f"k={SECRET}%C3%A9", f"k={SECRET}\u20ac",
                     f"bad name={SECRET}", f"a=1,b={SECRET}%00"]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12).map(lambda t: f"k={SECRET}{t}"),
)
_env = st.dictionaries(st.sampled_from(_NAMES), _value, max_size=6)


def _check(env: dict[str, str]) -> None:
    problem = otlp_problem("run", env)
    if problem is not None:
        assert isinstance(problem, str) and problem and "\n" not in problem
        if not any(SECRET in v for k, v in env.items() if "HEADERS" not in k):  # else it may be a path, a URL
            assert SECRET not in problem, problem
        assert problem.startswith("OTEL_"), problem  # names the variable
        return
    sink = OtlpSink(env)
    t = sink.settings.transport
    assert math.isfinite(t.timeout_s) and t.timeout_s > 0
    transport = sink._transport
    if isinstance(transport, HttpTransport):
        transport._request(b"x", {"Content-Type": "application/x-protobuf", **dict(t.headers)})
    else:
        assert isinstance(transport, GrpcTransport)
    sink.shutdown()
    m = metrics_settings(env)
    if m is not None:
        assert math.isfinite(m.timeout_s) and m.timeout_s > 0
        assert math.isfinite(m.interval_ms) and math.isfinite(m.export_timeout_ms)


@settings(**SETTINGS)
@given(env=_env)
@example(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"})
@example(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:99999"})
@example(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h/a b"})
@example(env={"OTEL_EXPORTER_OTLP_TIMEOUT": "nan"})
@example(env={"OTEL_EXPORTER_OTLP_TIMEOUT": "inf"})
@example(env={"OTEL_EXPORTER_OTLP_HEADERS": f"k={SECRET}%C3%A9"})
@example(env={"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
              "OTEL_EXPORTER_OTLP_ENDPOINT": "https://h:4317"})
@example(env={"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": f"x={SECRET}%0A"})
@example(env={"OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "inf"})
def test_any_otel_variables_work_or_are_a_configuration_error(env: dict[str, str]) -> None:
    _check(env)


@pytest.mark.parametrize("env", [
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"},
    {"OTEL_EXPORTER_OTLP_HEADERS": f"k={SECRET}%C3%A9"},
    {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": f"x={SECRET}%0A"},
], ids=["bad_ipv6", "non_ascii_header", "metrics_header"])
def test_ccotel_run_says_so_and_exits_2(env: dict[str, str], tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    clean["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "ccotel", "run", "--root", str(tmp_path / "claude"),
                           "--metrics-addr", "none"], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr and "OTEL_" in done.stderr
    assert not (tmp_path / "xdg").exists()  # before any work
