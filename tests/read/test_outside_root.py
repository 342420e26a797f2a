"""Files ccotel reads under a root besides the transcripts (history.jsonl, sessions/<pid>.json,
settings*.json) are read only when they resolve inside the root: one that is a symlink to a file
elsewhere is not read, and is counted and said (``path_outside_root``), as transcripts are
(run/reader.py). Before, each was opened through the link: ``ccotel check`` answered
transcript_swept citing a history file outside the root."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Level
from ccotel.commands.doctor.telemetry import check_claude_code_telemetry
from ccotel.read import evidence, procs

SID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


def _root_linking_out(tmp_path: Path) -> tuple[Path, Path]:
    """A root whose history.jsonl, sessions/<pid>.json and settings.json are symlinks to files
    outside it, which name the session SID (and a short retention)."""
    root, elsewhere = tmp_path / "claude", tmp_path / "elsewhere"
    (root / "projects").mkdir(parents=True)
    (root / "sessions").mkdir()
    elsewhere.mkdir()
    (elsewhere / "history.jsonl").write_text(json.dumps({"sessionId": SID, "timestamp": 1_700_000_000_000}) + "\n")
    (elsewhere / "4242.json").write_text(json.dumps({"pid": os.getpid(), "sessionId": SID, "startedAt": 1}))
    (elsewhere / "settings.json").write_text(json.dumps({
        "cleanupPeriodDays": 3, "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_TRACES_EXPORTER": "otlp"}}))
    (root / "history.jsonl").symlink_to(elsewhere / "history.jsonl")
    (root / "sessions" / "4242.json").symlink_to(elsewhere / "4242.json")
    (root / "settings.json").symlink_to(elsewhere / "settings.json")
    return root, elsewhere


def test_files_linked_out_of_the_root_are_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, elsewhere = _root_linking_out(tmp_path)
    caplog.set_level(logging.WARNING)
    assert evidence.known_sessions((str(root),)) == {}
    assert procs.session_files((str(root),)) == [] and procs.read_session_pids((str(root),)) == {}
    assert evidence.retention_of(str(root)) == 30  # Claude Code's default, not the linked file's 3
    for linked in ("history.jsonl", "sessions/4242.json", "settings.json"):  # each said
        assert f"path_outside_root: {root / linked} resolves outside the root" in caplog.text
    # the same files inside the root are read
    for name in ("history.jsonl", "settings.json"):
        (root / name).unlink()
        (root / name).write_text((elsewhere / name).read_text())
    (root / "sessions" / "4242.json").unlink()
    (root / "sessions" / "4242.json").write_text((elsewhere / "4242.json").read_text())
    assert SID in evidence.known_sessions((str(root),))
    assert [doc["sessionId"] for _r, doc in procs.session_files((str(root),))] == [SID]
    assert evidence.retention_of(str(root)) == 3


def test_check_does_not_answer_from_a_history_outside_the_root(tmp_path: Path) -> None:
    root, elsewhere = _root_linking_out(tmp_path)
    done = subprocess.run([sys.executable, "-m", "ccotel", "check", SID, "--root", str(root), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert "transcript_swept" not in done.stdout and str(elsewhere) not in done.stdout, done.stdout
    assert "path_outside_root" in done.stderr


def test_doctor_does_not_read_settings_outside_the_root(tmp_path: Path) -> None:
    root, _elsewhere = _root_linking_out(tmp_path)
    findings, _ports = check_claude_code_telemetry(DoctorConfig(
        roots=(str(root),), state_dir=None, metrics_addr=None, traces_exporter="otlp", env={},
        managed_settings=str(tmp_path / "none.json"), timeout_s=1.0))
    outside = [f for f in findings if "path_outside_root" in f.message]
    assert [f.level for f in outside] == [Level.WARN] and outside[0].subject == str(root / "settings.json")
    assert not any("OTEL_TRACES_EXPORTER=otlp" in f.message for f in findings)


def test_ccotel_run_counts_each_linked_side_file_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ccotel run's detectors read these files again every few seconds: each linked out of the root
    is counted once in ccotel_parse_errors_total{reason="path_outside_root"} and said once. Before,
    they were said only (a process-wide counter that nothing exposed)."""
    from ccotel.assemble.assembler import Assembler
    from ccotel.metrics.counters import Metrics
    from ccotel.run.detectors import Detectors

    root, _elsewhere = _root_linking_out(tmp_path)
    metrics = Metrics()
    now = [10**18]
    detectors = Detectors((str(root),), Assembler(), lambda: now[0], metrics, None, 180 * 10**9)
    caplog.set_level(logging.WARNING)
    for _ in range(3):  # three polls, more than a second apart (the pids are read again)
        now[0] += 2 * 10**9
        assert detectors.alive(SID) is None
        assert detectors._retention() == 30
        detectors._judge_known(now[0], {})
    assert metrics.value("ccotel_parse_errors", "path_outside_root") == 3
    assert caplog.text.count("resolves outside the root") == 3
