"""``ccotel hook``: one spool line per event, only ids, names, reasons and times; never a failure, never a
word on stdout, whatever the input; and the CLI, the pipeline and the exporters stay unloaded."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccotel.commands import hook
from ccotel.sources.hooks import spool

REPO = Path(__file__).resolve().parents[2]
PERMISSION = {"session_id": "s1", "transcript_path": "/secret/path.jsonl", "cwd": "/home/u/proj",
              "permission_mode": "default", "hook_event_name": "PermissionRequest", "tool_name": "Bash",
              "tool_input": {"command": "curl -H 'Authorization: Bearer sk-SECRET' x"}, "permission_suggestions": []}


def lines(state: Path) -> list[dict[str, object]]:
    out = []
    for path in sorted((state / "hooks").glob("spool-*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def feed(state: Path, data: bytes) -> bool:
    return hook.handle(io.BytesIO(data), str(state), {})


def test_an_event_is_one_line_without_its_content(tmp_path: Path) -> None:
    before = time.time_ns()
    assert feed(tmp_path, json.dumps(PERMISSION).encode())
    end = {"session_id": "s1", "hook_event_name": "SessionEnd", "reason": "logout"}
    assert feed(tmp_path, json.dumps(end).encode())
    first, second = lines(tmp_path)
    assert first["event"] == "PermissionRequest" and first["tool_name"] == "Bash" and first["session_id"] == "s1"
    assert before <= int(first["t"]) <= time.time_ns()  # type: ignore[call-overload]
    assert first["input_digest"] == spool.input_digest(PERMISSION["tool_input"])
    assert second == {"t": second["t"], "event": "SessionEnd", "session_id": "s1", "reason": "logout"}
    text = (tmp_path / "hooks" / spool.spool_name(before)).read_text()
    assert "SECRET" not in text and "/secret" not in text and "/home/u" not in text


@pytest.mark.parametrize("data", [b"", b"garbage", b"[1, 2]", b"{\"hook_event_name\": \"Stop\"}",
                                  b"{\"hook_event_name\": 3}", b"\xff\xfe"])
def test_bad_input_writes_nothing_and_fails_nothing(tmp_path: Path, data: bytes,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert hook.main(["--state", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    assert lines(tmp_path) == []


def test_an_unwritable_state_is_silent_and_successful(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(PERMISSION).encode())))
    assert hook.main([f"--state={blocker}"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_a_full_day_drops_events_and_old_days_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "hooks"
    d.mkdir()
    old = d / spool.spool_name(time.time_ns() - (spool.KEEP_DAYS + 1) * 86_400 * 10**9)
    kept = d / spool.spool_name(time.time_ns() - (spool.KEEP_DAYS - 1) * 86_400 * 10**9)
    old.write_text("")
    kept.write_text("")
    monkeypatch.setattr(spool, "MAX_FILE_BYTES", 200)
    end = json.dumps({"session_id": "s" * 50, "hook_event_name": "SessionEnd", "reason": "other"}).encode()
    assert feed(tmp_path, end)  # a new day's file: the days past KEEP_DAYS go
    assert not old.exists() and kept.exists()
    assert not feed(tmp_path, end)  # past MAX_FILE_BYTES: dropped
    assert len(lines(tmp_path)) == 1


def test_the_state_dir_is_the_other_commands(tmp_path: Path) -> None:
    data = json.dumps({"session_id": "s1", "hook_event_name": "PreCompact", "trigger": "auto"}).encode()
    assert hook.handle(io.BytesIO(data), None, {"CCOTEL_STATE": str(tmp_path / "a")})
    assert hook.handle(io.BytesIO(data), None, {"XDG_STATE_HOME": str(tmp_path / "x")})
    assert lines(tmp_path / "a")[0]["trigger"] == "auto"
    assert lines(tmp_path / "x" / "ccotel")[0]["event"] == "PreCompact"


def test_python_m_ccotel_hook_loads_neither_the_cli_nor_the_pipeline(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CCOTEL_STATE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ccotel", "hook"], input=json.dumps(PERMISSION),
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == ""
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "ccotel.sources.hooks.spool" in loaded
    heavy = {m for m in loaded if m.split(".")[0] in ("argparse", "logging", "orjson", "opentelemetry", "sqlite3",
                                                       "prometheus_client", "rich")
             or m in ("ccotel.cli", "ccotel.run", "ccotel.export", "ccotel.store.state", "ccotel.metrics")}
    assert heavy == set()
    assert lines(tmp_path)[0]["event"] == "PermissionRequest"


def test_ccotel_hook_through_the_cli_parser_spools_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ccotel.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(PERMISSION).encode())))
    assert main(["hook", "--state", str(tmp_path)]) == 0
    assert lines(tmp_path)[0]["tool_name"] == "Bash"
