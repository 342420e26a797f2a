"""An OTLP header no request can carry (OTEL_EXPORTER_OTLP_HEADERS with a CR/LF or another control
character in a value, or a name that is no token) is a configuration error: every command that
exports refuses to start (exit 2, before any work), naming the header and never its value, which is
often a credential; doctor reports it as a failure, without the value. Before, each export raised
it again: logged with the value, retried as an outage, and a backfill never ended."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Level
from ccotel.commands.doctor.telemetry import check_claude_code_telemetry
from ccotel.commands.doctor.traces import check_traces
from ccotel.export.sinks import otlp_config_error, otlp_settings
from ccotel.export.transport import HeaderError, parse_headers

BAD = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=KEY%0D%0AX:%20y"}


@pytest.mark.parametrize("raw", ["x-api-key=KEY%0D%0AX:%20y", "x-api-key=KEY%0Ax", "x-api-key=KEY%00",
                                 "a=1,x-api-key=KEY\r\nX: y", "bad name=KEY"])
def test_a_header_no_request_can_carry_is_refused_without_its_value(raw: str) -> None:
    with pytest.raises(HeaderError) as refused:
        parse_headers(raw)
    assert "KEY" not in str(refused.value)
    assert "x-api-key" in str(refused.value) or "bad name" in str(refused.value)
    assert parse_headers("authorization=Bearer%20tok,x-a=b") == (("authorization", "Bearer tok"), ("x-a", "b"))


def test_the_error_names_the_variable() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=KEY%0A"}
    problem = otlp_config_error(env)
    assert problem is not None and problem.startswith("OTEL_EXPORTER_OTLP_TRACES_HEADERS:") and "KEY" not in problem
    assert otlp_config_error(BAD) is not None and otlp_config_error({}) is None
    with pytest.raises(HeaderError):
        otlp_settings(BAD)


@pytest.mark.parametrize("command", ["run", "backfill", "relay"])
def test_every_command_that_exports_refuses_to_start(command: str, tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env.update(BAD, XDG_STATE_HOME=str(tmp_path / "xdg"), OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    extra = {"run": ["--metrics-addr", "none"], "backfill": [], "relay": []}[command]
    done = subprocess.run([sys.executable, "-m", "ccotel", command, "-v", "--root", str(root), *extra], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "'x-api-key'" in done.stderr and "KEY" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "xdg").exists()  # before any work


def test_doctor_fails_the_traces_check_without_the_value(tmp_path: Path) -> None:
    cfg = DoctorConfig(roots=(), state_dir=None, metrics_addr=None, traces_exporter="otlp", env=BAD,
                       managed_settings=str(tmp_path / "none.json"), timeout_s=1.0)
    found = check_traces(cfg)
    assert [f.level for f in found] == [Level.FAIL]
    assert "'x-api-key'" in found[0].message and "KEY" not in str(found[0].as_dict())
    # Claude Code's settings with the same header: compared by endpoint only, nothing raised or shown
    root = tmp_path / "claude"
    root.mkdir()
    (root / "settings.json").write_text('{"env": {"OTEL_TRACES_EXPORTER": "otlp", '
                                        '"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=KEY%0D%0AX:%20y"}}')
    telemetry, _ports = check_claude_code_telemetry(DoctorConfig(
        roots=(str(root),), state_dir=None, metrics_addr=None, traces_exporter="otlp", env=BAD,
        managed_settings=str(tmp_path / "none.json"), timeout_s=1.0))
    assert "KEY" not in str([f.as_dict() for f in telemetry])
