"""The plugin and the hooks with the real Claude Code CLI (the harness: ``claude -p`` against a scripted fake
API on 127.0.0.1), with ``--plugin-dir plugin`` and a ``ccotel`` on PATH that runs this tree:

1. ``ccotel run`` follows an empty config dir; the CLI runs a Bash call that needs permission, asked of the
   host (``--permission-prompt-tool stdio``), which allows it after 1.5 s. The plugin's hooks fire
   (``--include-hook-events`` shows them), ``ccotel hook`` spools them, and ``ccotel run`` puts the wait on
   the tool's span and counts it in ``ccotel_permission_wait_seconds``, and the session's end in
   ``ccotel_sessions_ended_total{reason="other"}``.
2. ``ccotel backfill`` of those transcripts and that spool into a fresh state: the end reason is on the
   session's last turn, the wait on the tool.
3. ``/ccotel:report``, ``/ccotel:trace`` and ``/ccotel:check`` expand under ``claude -p``: their command ran
   (its output is in the prompt the fake API got, with this session's own id) and the run answered.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fakeapi import FakeAPI, Message, Rule, text
from tests.harness.runner import Sandbox, StdinStep
from tests.harness.scenarios import bash, usage_for
from tests.support import prometheus as prom
from tests.support.otlp import OtlpReceiver

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
WAIT_S = 1.5  # the host answers the permission request after this long
PROMPT = "HOOKS create a file"
ANSWER = "PLUGIN-COMMAND-ANSWERED"
SUMMARY = "HOOKS-SUMMARY"


def rules() -> list[Rule]:
    u = lambda i: usage_for(30, i)  # noqa: E731
    return [
        Rule("hooks.touch", Message([text("Creating it."), bash("touch made.txt", "Create a file")], u(0)),
             first_user="HOOKS ", turns=0),
        Rule("hooks.final", Message([text("Created made.txt.")], u(1)), first_user="HOOKS ", turns=1),
        Rule("hooks.compact", Message([text(f"<summary>{SUMMARY}: a file was created.</summary>")], u(3)),
             first_user="HOOKS ", last_user="create a detailed summary of the conversation", in_transcript=False),
        Rule("command", Message([text(ANSWER)], u(2))),  # a plugin command's expanded prompt
    ]


def shim(sandbox: Sandbox, state: Path) -> dict[str, str]:
    """A ``ccotel`` on PATH running this tree, with the state dir the test's ``ccotel run`` uses."""
    bindir = sandbox.root / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "ccotel"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} CCOTEL_STATE={state} exec {sys.executable} -m ccotel \"$@\"\n")
    exe.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def host_allows_after(sandbox: Sandbox, seconds: float) -> tuple[dict[str, Any], Any]:
    """A stdin step's line (filled in when sent) and its condition: the CLI asked can_use_tool ``seconds`` ago."""
    answer: dict[str, Any] = {}
    asked: dict[str, float] = {}

    def when() -> bool:
        for r in sandbox.live_records():
            req = r.get("request") or {}
            if r.get("type") == "control_request" and req.get("subtype") == "can_use_tool":
                asked.setdefault("at", time.monotonic())
                if time.monotonic() - asked["at"] < seconds:
                    return False
                answer.update({"type": "control_response", "response": {
                    "subtype": "success", "request_id": r["request_id"],
                    "response": {"behavior": "allow", "updatedInput": req.get("input", {})}}})
                return True
        return False

    return answer, when


def start_run(config_dir: Path, state: Path, endpoint: str, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint)
    return subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(config_dir), "--state-dir", str(state),
         "--metrics-addr", f"127.0.0.1:{port}", "--no-status"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def sample(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def prompts(request_log: Path) -> list[str]:
    """The text of every message of each request the fake API got."""
    out = []
    for line in request_log.read_text().splitlines():
        body = json.loads(line).get("body") or {}
        texts = []
        for m in body.get("messages") or []:
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            texts += [b.get("text", "") for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
        out.append("\n".join(texts))
    return out


def test_plugin_hooks_reach_spans_and_metrics_and_its_commands_answer(claude_cli: Path, tmp_path: Path) -> None:
    sandbox = Sandbox.create(base=tmp_path)
    (sandbox.projects_dir).mkdir(parents=True, exist_ok=True)
    state = tmp_path / "state"
    env = shim(sandbox, state)
    plugin = ["--plugin-dir", str(PLUGIN)]
    port = prom.free_port()
    request_log = tmp_path / "requests.jsonl"
    with OtlpReceiver() as rx, FakeAPI("hooks", rules(), tmp_path / "gt.jsonl", request_log=request_log) as api:
        run = start_run(sandbox.config_dir, state, rx.endpoint, port)
        try:
            wait(lambda: "ccotel_sessions_ended_total" in scrape(port), 40, "ccotel run's /metrics")

            # 1. live: a Bash call the host allows after WAIT_S, then the session ends
            answer, asked = host_allows_after(sandbox, WAIT_S)
            done = lambda: any(r.get("type") == "result" for r in sandbox.live_records())  # noqa: E731
            res = sandbox.run(api.base_url, None, allowed_tools="", env=env, timeout=60, extra_args=[
                *plugin, "--permission-prompt-tool", "stdio", "--include-hook-events"], stdin_steps=[
                StdinStep({"type": "user", "message": {"role": "user", "content": PROMPT}}),
                StdinStep(answer, when=asked), StdinStep(None, when=done)])
            assert res.returncode == 0, res.stderr[-2000:]
            assert (sandbox.cwd / "made.txt").exists()
            sid = res.session_id
            assert sid
            hooks_seen = {r.get("hook_event") or r.get("hook_name") for r in res.records
                          if r.get("type") == "system" and r.get("subtype") == "hook_response"}
            assert {"PermissionRequest", "PostToolUse"} <= hooks_seen, hooks_seen
            spooled = [json.loads(line) for f in sorted((state / "hooks").glob("spool-*.jsonl"))
                       for line in f.read_text().splitlines()]
            # PostToolUse runs async: Claude Code kills an async hook still starting when `-p` exits, so it may
            # be missing (the wait then ends at the tool's result); SessionEnd is not async.
            assert {"PermissionRequest", "SessionEnd"} <= {e["event"] for e in spooled}, spooled
            answered = any(e["event"] == "PostToolUse" for e in spooled)
            assert all(e["session_id"] == sid for e in spooled)
            assert not any("made.txt" in json.dumps(e) for e in spooled)  # no tool input in the spool

            tool = wait(lambda: next((s for s in rx.spans if s["name"] == "execute_tool Bash"), None), 30,
                        "the Bash span")
            waited = tool["attributes"]["claude_code.tool.permission_wait_s"]
            assert WAIT_S - 0.3 <= waited <= WAIT_S + 5, waited  # the host's delay, plus the hook starts under load
            metrics = wait(lambda: (t := scrape(port)) and sample(
                t, 'ccotel_sessions_ended_total{reason="other"}') == 1 and t, 30, "the session end counted")
            assert sample(metrics, 'ccotel_permission_wait_seconds_count{tool="Bash"}') == 1
            assert sample(metrics, 'ccotel_permission_wait_seconds_sum{tool="Bash"}') == pytest.approx(waited, abs=0.01)
            assert sample(metrics, 'ccotel_hook_events_total{event="PermissionRequest",kind=""}') == 1
            live_root = wait(lambda: next((s for s in rx.spans if s["name"].startswith("invoke_agent")
                                           and not s["parent_span_id"]), None), 30, "the turn")

            # a manual compaction of that session: PreCompact (trigger manual), a second SessionEnd
            r = sandbox.run(api.base_url, "/compact", allowed_tools="", resume=sid, extra_args=plugin, env=env,
                            timeout=60)
            assert r.returncode == 0, r.stderr[-2000:]
            metrics = wait(lambda: (t := scrape(port)) and sample(
                t, 'ccotel_sessions_ended_total{reason="other"}') == 2 and t, 30, "the second session end")
            assert sample(metrics, 'ccotel_hook_events_total{event="PreCompact",kind="manual"}') == 1
        finally:
            run.terminate()
            try:
                run.wait(timeout=20)
            except subprocess.TimeoutExpired:
                run.kill()
        live_end_reason = live_root["attributes"].get("claude_code.session.end_reason")
        print(f"live: permission wait {waited} s on the span (PostToolUse spooled: {answered}); "
              f"end reason on the live turn: {live_end_reason}")

        # 2. backfill of those transcripts and that spool into a fresh state: the end on the last turn
        fresh = tmp_path / "fresh"
        shutil.copytree(state / "hooks", fresh / "hooks")
        with OtlpReceiver() as rx2:
            env2 = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            env2.update(PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=rx2.endpoint)
            back = subprocess.run([sys.executable, "-m", "ccotel", "backfill", "--root", str(sandbox.config_dir),
                                   "--state-dir", str(fresh), "--close-all"],
                                  env=env2, capture_output=True, text=True, timeout=60)
            assert back.returncode == 0, back.stderr[-2000:]
            spans = rx2.spans
        tool2 = next(s for s in spans if s["name"] == "execute_tool Bash")
        root = next(s for s in spans if s["trace_id"] == tool2["trace_id"] and not s["parent_span_id"])
        assert root["attributes"]["claude_code.session.end_reason"] == "other"
        assert root["attributes"]["session.id"] == sid
        # live, the (async) PostToolUse hook may be spooled after the span was built: the wait then ends at
        # the tool's result, its own run time later (docs/hooks.md); the backfill has PostToolUse
        assert tool2["attributes"]["claude_code.tool.permission_wait_s"] == pytest.approx(waited, abs=0.1)

        # 3. the plugin's commands, in -p mode (trace and check on the session above: --resume)
        asked_before = len(prompts(request_log))
        for command, resume in (("/ccotel:report", None), ("/ccotel:trace --turn 1", sid), ("/ccotel:check", sid)):
            r = sandbox.run(api.base_url, command, allowed_tools="", resume=resume, extra_args=plugin, env=env,
                            timeout=60)
            assert r.returncode == 0, (command, r.stderr[-2000:])
            assert (r.result or {}).get("result") == ANSWER, (command, r.result)
        expanded = prompts(request_log)[asked_before:]
        report, trace, check = (next((p for p in expanded if f"from `ccotel {name}" in p), "") for name in
                                ("report daily", "trace`", "check`"))
        assert "ccotel report: daily" in report and "ccotel is not installed" not in report, report
        assert f"session {sid}" in trace and "execute_tool Bash" in trace, trace
        # typed in the session itself, check sees that session's own process running (session_live)
        assert f"session {sid}: " in check and "assistant   yes" in check and "session_live" in check, check


def test_without_ccotel_on_path_the_plugins_hooks_are_silent_and_successful(claude_cli: Path, tmp_path: Path) -> None:
    sandbox = Sandbox.create(base=tmp_path)
    env = {"PATH": "/usr/bin:/bin"}  # no ccotel
    with FakeAPI("nohooks", rules(), tmp_path / "gt.jsonl") as api:
        r = sandbox.run(api.base_url, PROMPT, allowed_tools="Bash", env=env, timeout=60,
                        extra_args=["--plugin-dir", str(PLUGIN), "--include-hook-events"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (r.result or {}).get("is_error") is False
    responses = [x for x in r.records if x.get("type") == "system" and x.get("subtype") == "hook_response"]
    # silent everywhere; successful, or (a background hook still running when `claude -p` exits)
    # cancelled by Claude Code: nothing of ours failed
    outcomes = [(x.get("hook_name"), x.get("outcome"), x.get("exit_code")) for x in responses]
    assert responses and not any((x.get("stdout") or "").strip() for x in responses), outcomes
    assert all(outcome == "success" or (name or "").startswith(("PostToolUse", "PreToolUse")) and outcome == "cancelled"
               for name, outcome, _code in outcomes), outcomes


@pytest.mark.parametrize("where", ["plugin", "."])
def test_the_plugin_and_the_marketplace_validate_strictly(claude_cli: Path, tmp_path: Path, where: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"), "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    r = subprocess.run([str(claude_cli), "plugin", "validate", "--strict", where], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Validation passed" in r.stdout, r.stdout + r.stderr
