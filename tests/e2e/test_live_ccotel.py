"""ccotel running live while the real Claude Code CLI runs scenarios, scraped by a real Prometheus.

- spans of a parallel-subagent run arrive at a loopback OTLP receiver while the CLI runs;
- the kill-mid-tool scenario (SIGKILL, then --resume), a ghost session and an orchestrator log
  show up in Prometheus as exactly the expected increments;
- on each Claude Code version selected by CCOTEL_CLAUDE_VERSIONS (default: the newest; `all` for the matrix):
  2.1.197 leaves the killed tool call as a dead branch (a session reset), 2.1.330 and later repair it
  on resume (still an orphaned tool call, no reset);
- ccotel is SIGKILLed and restarted in the middle, and every counter stays exact;
- `promtool check metrics` passes on the live exposition.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.harness.fakeapi import FakeAPI
from tests.harness.install import OLDEST, selected_versions
from tests.harness.runner import Sandbox
from tests.harness.scenarios import SCENARIOS, Context, api_tag
from tests.support import prometheus as prom
from tests.support.fixtures import missing_component
from tests.support.otlp import OtlpReceiver

pytestmark = pytest.mark.e2e

LOG_LINES = [
    "[agent/cli-backend] cli session reset: provider=claude-cli reason=missing-transcript",
    "claude live session close: provider=claude-cli model=claude-opus reason=abort",
    "decision=candidate_failed reason=timeout detail=CLI produced no output for 180s and was terminated.",
]


def free_port() -> int:
    return prom.free_port()


def start_ccotel(root: Path, state: Path, endpoint: str, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    return subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(state),
         "--metrics-addr", f"127.0.0.1:{port}", "--orchestrator-log", f"{log}=openclaw",
         "--stall-timeout", "4", "--no-status"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def run_live(name: str, sandbox: Sandbox) -> Path:
    """Run a harness scenario in an existing sandbox (ccotel already watches its config dir)."""
    scenario = SCENARIOS[name]
    gt = sandbox.root / f"{name}.ground_truth.jsonl"
    with FakeAPI(api_tag(scenario, sandbox.version), scenario.rules(version=sandbox.version), gt) as api:
        scenario.drive(Context(api=api, sandbox=sandbox))
    return gt


def responses(gt: Path) -> list[dict]:
    out = []
    for line in gt.read_text().splitlines():
        r = json.loads(line)
        if r.get("endpoint") == "messages" and r.get("matched") and r.get("status") == 200 \
                and r.get("expect_in_transcript", True):
            out.append(r)
    return out


def value(p: prom.PrometheusServer, expr: str) -> float:
    res = p.query(f"sum({expr})")
    return res[0][1] if res else 0.0


def wait_value(p: prom.PrometheusServer, expr: str, want: float, timeout: float = 40) -> None:
    p.wait_for(f"sum({expr})", lambda r: bool(r) and r[0][1] == want, timeout=timeout)


def wait_spans(rx: OtlpReceiver, pred, timeout: float = 40) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = list(rx.spans)
        if pred(spans):
            return spans
        time.sleep(0.1)
    raise AssertionError(f"spans never satisfied the check; got {sorted(s['name'] for s in rx.spans)}")


@pytest.mark.parametrize("version", selected_versions())
def test_live_spans_metrics_and_restart(version, claude_cli, tmp_path):
    if prom.missing_reason():
        missing_component(prom.missing_reason())
    sandbox = Sandbox.create(base=tmp_path, version=version)
    (sandbox.config_dir / "projects").mkdir(parents=True, exist_ok=True)
    log = tmp_path / "gateway.log"
    log.write_text("old line: cli session reset: provider=claude-cli reason=missing-transcript\n")  # history
    port = free_port()
    with OtlpReceiver() as rx, prom.PrometheusServer(targets=[("127.0.0.1", port)], scrape_interval="1s") as p:
        ccotel = start_ccotel(sandbox.config_dir, tmp_path / "state", rx.endpoint, port, log)
        try:
            p.wait_for('up{job="ccotel"}', lambda r: bool(r) and r[0][1] == 1, timeout=40)
            # 1. parallel subagents: the spans arrive while ccotel follows the files live
            gt3 = responses(run_live("s03_parallel_subagents", sandbox))
            want = {r["message_id"] for r in gt3}
            spans = wait_spans(rx, lambda ss: want <= {s["attributes"].get("gen_ai.response.id") for s in ss}
                               and sum(1 for s in ss
                                       if s["name"].startswith("invoke_agent") and s["parent_span_id"]) >= 2)
            by_id = {s["span_id"]: s for s in spans}
            for s in spans:
                if s["name"].startswith("invoke_agent") and s["parent_span_id"]:
                    assert by_id[s["parent_span_id"]]["name"] == "execute_tool Agent"
            for r in gt3:
                chat = next(s for s in spans if s["attributes"].get("gen_ai.response.id") == r["message_id"])
                assert chat["attributes"]["gen_ai.usage.output_tokens"] == r["usage"]["output_tokens"]
            wait_value(p, 'ccotel_api_calls_total{job="ccotel"}', len(gt3))

            # 2. restart ccotel the hard way in the middle of the run
            ccotel.send_signal(signal.SIGKILL)
            ccotel.wait(timeout=10)
            ccotel = start_ccotel(sandbox.config_dir, tmp_path / "state", rx.endpoint, port, log)

            # 3. the kill-mid-tool scenario: SIGKILL during `sleep`, then --resume
            gt6 = responses(run_live("s06_kill_orphan_resume", sandbox))
            wait_value(p, 'ccotel_orphaned_tool_uses_total{job="ccotel",tool="Bash"}', 1)
            resets = 'ccotel_session_resets_total{job="ccotel",reason="orphaned_tool_use",source="transcript"}'
            if version == OLDEST:  # the resume continued without the call: a dead branch, a reset
                wait_value(p, resets, 1)
            wait_value(p, 'ccotel_api_calls_total{job="ccotel"}', len(gt3) + len(gt6))
            if version != OLDEST:  # 2.1.330 and later repaired the call on resume: nothing was lost, no reset
                time.sleep(3)
                assert value(p, resets) == 0
            killed = value(p, 'ccotel_killed_turns_total{job="ccotel"}')
            orphaned = value(p, 'ccotel_turns_total{job="ccotel",outcome="orphaned"}')
            assert killed + orphaned == 1  # killed if ccotel saw the dead pid before the resume

            # 4. a ghost session: a prompt, and no assistant record ever
            ghost = sandbox.config_dir / "projects" / "-tmp-ghost" / "0badc0de-1111-4222-8333-444444444444.jsonl"
            ghost.parent.mkdir(parents=True)
            ghost.write_text(json.dumps({
                "type": "user", "uuid": "g1", "parentUuid": None, "sessionId": ghost.stem,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                "message": {"role": "user", "content": "hello?"}}) + "\n")
            # 5. an orchestrator logs a reset, an abort and a watchdog kill
            with open(log, "a") as f:
                f.write("\n".join(LOG_LINES) + "\n")
            wait_value(p, 'ccotel_session_resets_total{job="ccotel",reason="missing_transcript",source="transcript"}',
                       1)
            wait_value(p, 'ccotel_session_resets_total{job="ccotel",reason="missing_transcript",source="openclaw"}', 1)
            wait_value(p, 'ccotel_aborts_total{job="ccotel",reason="abort",source="openclaw"}', 1)
            wait_value(p, 'ccotel_watchdog_kills_total{job="ccotel",source="openclaw"}', 1)
            wait_value(p, 'ccotel_missing_transcripts_total{job="ccotel",kind="session"}', 1)

            # 6. another hard restart: every counter keeps its exact value, nothing counted twice
            before = {s[0]["__name__"] + json.dumps(s[0], sort_keys=True): s[1]
                      for s in p.query('{job="ccotel",__name__=~"ccotel_.*_total"}')}
            ccotel.send_signal(signal.SIGKILL)
            ccotel.wait(timeout=10)
            ccotel = start_ccotel(sandbox.config_dir, tmp_path / "state", rx.endpoint, port, log)
            p.wait_for('ccotel_start_time_seconds{job="ccotel"}', lambda r: bool(r) and r[0][1] > time.time() - 30)
            time.sleep(3)
            after = {s[0]["__name__"] + json.dumps(s[0], sort_keys=True): s[1]
                     for s in p.query('{job="ccotel",__name__=~"ccotel_.*_total"}')}
            for k, v in before.items():
                if "lines_read" in k or "bytes_read" in k or "spans_exported" in k or "export_failures" in k:
                    assert after.get(k, 0) >= v, k
                else:
                    assert after.get(k) == v, (k, v, after.get(k))
            assert value(p, 'ccotel_tool_calls_total{job="ccotel"}') == sum(
                1 for r in gt3 + gt6 for b in r["blocks"] if b["type"] == "tool_use")
            tokens = sum(r["usage"]["output_tokens"] for r in gt3 + gt6)
            assert value(p, 'ccotel_tokens_total{job="ccotel",type="output"}') == tokens

            # 7. the exposition passes promtool
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                text = resp.read().decode()
            ok, out = prom.promtool_check_metrics(text)
            assert ok, out
        finally:
            ccotel.send_signal(signal.SIGTERM)
            try:
                _, err = ccotel.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                ccotel.kill()
                raise
            assert "Traceback" not in err, err
