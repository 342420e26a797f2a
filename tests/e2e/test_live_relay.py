"""``ccotel relay -- claude -p ...``: the real CLI (the newest of the matrix) against the fake API,
wrapped by the relay; the spans go to a real OTLP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@pytest.mark.parametrize("scenario,prompt,expected_exit", [
    ("s01_bash_tool", "S01 run echo hello with Bash and report", 0),
    ("s07_api_errors", "S07-A: this request gets a 400 invalid_request_error", 1),
])
def test_live_relay_wraps_the_real_cli(scenario: str, prompt: str, expected_exit: int, claude_cli: Path,
                                       tmp_path: Path) -> None:
    """``ccotel relay -- claude -p ...`` against the fake API: the CLI's stdout passes through
    whole (and, for s01, byte for byte: a second run through ``tee`` keeps the CLI's own copy),
    its exit status is relay's, and the spans reach a real OTLP receiver with the ids the
    transcript path gives."""
    from tests.harness.fakeapi import FakeAPI
    from tests.harness.install import CLAUDE_CODE_VERSION
    from tests.harness.runner import Sandbox
    from tests.harness.scenarios import SCENARIOS, api_tag
    from tests.support.otlp import OtlpReceiver

    sc = SCENARIOS[scenario]
    sandbox = Sandbox.create(base=tmp_path)
    binary = claude_cli
    with FakeAPI(api_tag(sc, CLAUDE_CODE_VERSION) + "_relay", sc.rules(version=CLAUDE_CODE_VERSION),
                 tmp_path / "gt.jsonl") as api, OtlpReceiver() as receiver:
        env = {**sandbox.env(api.base_url), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
               "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "ccotel", "relay", "--root", str(sandbox.config_dir), "--", str(binary), "-p",
                prompt, "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"]
        proc = subprocess.run(argv, cwd=sandbox.cwd, env=env, capture_output=True, timeout=120)
        assert proc.returncode == expected_exit, proc.stderr[-3000:]
        records = [json.loads(ln) for ln in proc.stdout.splitlines()]
        assert records[0]["subtype"] == "init" and records[-1]["type"] == "result"
        assert proc.stdout.endswith(b"\n") and len(records) == proc.stdout.count(b"\n")
        spans: list[SpanRecord] = []
        Pipeline(Options(roots=(str(sandbox.config_dir),)), emit=spans.extend).backfill(close_all=True)
        got = receiver.wait_for(len(spans), timeout_s=10)
        if scenario == "s01_bash_tool":  # the CLI's own bytes beside what relay printed
            raw = tmp_path / "raw.jsonl"
            teed = ["bash", "-c", 'set -o pipefail; "$@" | tee "$RAW"', "claude", *argv[argv.index("--") + 1:]]
            again = subprocess.run([*argv[:argv.index("--") + 1], *teed], cwd=sandbox.cwd,
                                   env={**env, "RAW": str(raw)}, capture_output=True, timeout=120)
            assert again.returncode == 0, again.stderr[-3000:]
            assert again.stdout == raw.read_bytes() and again.stdout.count(b"\n") >= 4
    by_id = {f"{s.span_id:016x}": s for s in spans}
    assert len(got) == len(spans), proc.stderr[-3000:]
    for s in got:
        mine = by_id[s["span_id"]]
        assert f"{mine.trace_id:032x}" == s["trace_id"], s["name"]
        assert s["attributes"]["ccotel.source"] == "stream"
    (turn,) = [s for s in got if s["parent_span_id"] is None]
    assert turn["attributes"]["ccotel.result.is_error"] is (expected_exit != 0)
    assert turn["attributes"]["ccotel.relay.linked"] is True
