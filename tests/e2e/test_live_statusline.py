"""``ccotel statusline`` driven by the real Claude Code CLI: its interactive UI (the only place it runs a
``statusLine`` command; ``-p`` does not) under tmux, against the scripted fake API, with a
settings.json whose statusLine pipes Claude Code's JSON through ``tee`` (kept as evidence) into
``python -m ccotel statusline``. Two prompts; after each the line on screen shows the session's cost
as ``ccotel report`` sums the transcript, and Claude Code's JSON has the documented fields."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccotel.commands.report.transcripts import build_report
from ccotel.run.pipeline import Options
from tests.harness.fakeapi import FakeAPI, Message, Rule, Usage, text
from tests.harness.install import CLAUDE_CODE_VERSION, claude_binary
from tests.harness.runner import Sandbox

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30,
                          check=False).stdout


def _wait(sock: str, want: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux(sock, "capture-pane", "-p", "-t", "cc")
        if want in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{want!r} not on screen after {timeout} s:\n{screen}")


def _type(sock: str, keys: str) -> None:
    _tmux(sock, "send-keys", "-t", "cc", keys, "")
    time.sleep(0.5)
    _tmux(sock, "send-keys", "-t", "cc", "Enter")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is needed to drive the interactive UI")
def test_the_interactive_cli_shows_ccotels_status_line(claude_cli, tmp_path):
    sb = Sandbox.create(prefix="ccotel-statusline-", base=tmp_path)
    rules = [Rule("sl.first", Message([text("Hello from the fake API.")], Usage(11, 23, 1301, 2403)),
                  first_user="SL ", turns=0),
             Rule("sl.second", Message([text("Second answer.")], Usage(7, 41, 517, 3704)), first_user="SL ", turns=1),
             Rule("other", Message([text("ok")], Usage(3, 2)))]  # anything else the UI asks
    capture = sb.root / "statusline-input.jsonl"
    state = sb.root / "state"
    command = (f"tee -a {shlex.quote(str(capture))} | PYTHONPATH={shlex.quote(str(REPO))} "
               f"{shlex.quote(sys.executable)} -m ccotel statusline --root {shlex.quote(str(sb.config_dir))} "
               f"--state {shlex.quote(str(state))}")
    (sb.config_dir / "settings.json").write_text(json.dumps({"statusLine": {"type": "command", "command": command}}))
    # a config a user who has started Claude Code before has: onboarding done, this folder trusted,
    # the API key approved (the interactive UI asks each of these once)
    (sb.config_dir / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark", "numStartups": 5,
        "customApiKeyResponses": {"approved": ["test"], "rejected": []},
        "projects": {str(sb.cwd): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}))
    sock = f"ccotel-sl-{sb.root.name}"
    with FakeAPI("sl", rules, sb.root / "ground_truth.jsonl") as api:
        env = {**sb.env(api.base_url), "TERM": "xterm-256color"}
        env.pop("NO_COLOR", None)
        binary = claude_binary(CLAUDE_CODE_VERSION) or claude_cli
        launch = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + f" {shlex.quote(str(binary))}"
        _tmux(sock, "new-session", "-d", "-s", "cc", "-x", "160", "-y", "40", "-c", str(sb.cwd), launch)
        try:
            _wait(sock, "❯")
            _type(sock, "SL first prompt")
            _wait(sock, "Hello from the fake API.")
            first = _wait(sock, "session $")
            _type(sock, "SL second prompt")
            _wait(sock, "Second answer.")
            deadline = time.monotonic() + 60
            report = {}
            while time.monotonic() < deadline:  # the line is redrawn after the message is written
                report = build_report(Options(roots=(str(sb.config_dir),)))
                screen = _tmux(sock, "capture-pane", "-p", "-t", "cc")
                if len(report) == 1 and next(iter(report.values())).api_calls == 2 and " 8k tok" in screen and \
                        f"session ${next(iter(report.values())).cost_usd:.2f}" in screen:
                    break
                time.sleep(0.3)
        finally:
            _tmux(sock, "kill-server")
    (sid, usage), = report.items()
    assert usage.api_calls == 2 and usage.total_tokens == 11 + 23 + 1301 + 2403 + 7 + 41 + 517 + 3704
    line = next(ln for ln in screen.splitlines() if "session $" in ln).strip()
    assert line.startswith("Opus") and f"session ${usage.cost_usd:.2f} 8k tok" in line, line  # 8,007: both calls
    assert "block $" in line and "left" in line, line
    assert "Claude Code $" not in line  # its own figure is the same here (one process, no compaction)
    assert "session $" in first
    docs = [json.loads(x) for x in capture.read_text().splitlines()]
    last = docs[-1]
    assert last["session_id"] == sid and Path(last["transcript_path"]).stem == sid
    assert {"id", "display_name"} <= set(last["model"]) and {"current_dir", "project_dir"} <= set(last["workspace"])
    assert {"total_cost_usd", "total_duration_ms"} <= set(last["cost"]) and "context_window" in last
    assert last["cost"]["total_cost_usd"] == pytest.approx(usage.cost_usd, abs=0.005)
