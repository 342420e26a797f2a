"""A directory or transcript under a root whose name is not UTF-8 (bytes a Latin-1 file system,
a copy from elsewhere or a hand made there) is skipped and counted (``path_not_utf8``): it made
``ccotel backfill`` and ``run`` crash at their first checkpoint (SQLite cannot bind the path),
``report`` in its cache and ``sessions --json`` in orjson, and ``check`` failed an assertion.
The sessions beside it are read as before, and every command ends as usual."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.read.discover import PathNotUtf8, scan
from ccotel.read.layout import is_utf8, main_transcripts, session_ids
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState
from tests.harness.fixtures import load_fixture

REPO = Path(__file__).resolve().parents[2]
BAD_DIR = b"-home-caf\xe9-proj"  # "café" in Latin-1
BAD_SID = "22222222-3333-4444-5555-666666666666"


@pytest.fixture
def root(tmp_path: Path) -> tuple[Path, str, str]:
    """A real session, the same transcript again under a project directory whose name is Latin-1,
    and a copy with a Latin-1 file name beside the real one. Returns (config, real id, copy id)."""
    config = tmp_path / "c"
    shutil.copytree(load_fixture("2.1.330-s01_bash_tool").config_dir, config)
    project = next((config / "projects").iterdir())
    main = next(project.glob("*.jsonl"))
    bad_dir = os.fsencode(config / "projects") + b"/" + BAD_DIR
    os.mkdir(bad_dir)
    shutil.copyfile(main, bad_dir + b"/" + f"{BAD_SID}.jsonl".encode())
    shutil.copyfile(main, os.fsencode(project) + b"/caf\xe9.jsonl")
    return config, main.stem, BAD_SID


def test_is_utf8():
    assert is_utf8("plain") and is_utf8("café") and not is_utf8(os.fsdecode(b"caf\xe9"))


def test_scan_skips_and_reports_both_names(root):
    config, real, _bad = root
    skipped: list[OSError] = []
    found = list(scan(str(config), skipped.append))
    assert [tf.session_id for tf in found] == [real]
    assert sorted(type(e).__name__ for e in skipped) == ["PathNotUtf8", "PathNotUtf8"]
    assert all(isinstance(e, PathNotUtf8) and e.filename for e in skipped)


def test_a_session_id_is_never_resolved_into_such_a_directory(root):
    config, real, bad = root
    assert session_ids([str(config)]) == {real}
    assert list(main_transcripts([str(config)], bad)) == []


def test_a_backfill_with_a_state_counts_them_and_checkpoints_the_rest(root, tmp_path):
    config, _real, _bad = root
    state = SqliteState(str(tmp_path / "state.db"))
    spans: list[object] = []
    pipeline = Pipeline(Options(roots=(str(config),)), emit=spans.extend, state=state)
    pipeline.backfill(close_all=True)
    pipeline.process_acks()  # a checkpoint is written: the crash was here
    assert spans and pipeline.stats.errors["path_not_utf8"] == 2
    assert all(is_utf8(path) for path in state.files())
    state.close()


def test_live_the_watcher_naming_such_a_file_reads_nothing(root):
    config, _real, bad = root
    pipeline = Pipeline(Options(roots=(str(config),)), emit=lambda spans: None, state=None)
    path = os.fsdecode(os.fsencode(config / "projects") + b"/" + BAD_DIR + b"/" + f"{bad}.jsonl".encode())
    pipeline.poll([path, os.path.dirname(path)])
    assert path not in pipeline.files and not pipeline.files


def _ccotel(config: Path, tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(tmp)}
    return subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", str(config)], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp)


@pytest.mark.parametrize("argv", [("report", "session", "--no-ledger", "--json"), ("sessions", "--json")])
def test_json_output_holds_the_real_session_and_the_log_says_what_was_skipped(root, tmp_path, argv):
    config, real, _bad = root
    proc = _ccotel(config, tmp_path, *argv)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert real in json.dumps(doc) and BAD_SID not in proc.stdout
    assert proc.stderr.count("its name is not UTF-8") == 2, proc.stderr


def test_check_and_trace_say_the_session_is_unknown(root, tmp_path):
    config, real, bad = root
    for command in ("check", "trace"):
        proc = _ccotel(config, tmp_path, command, bad)
        assert proc.returncode == 2 and "unknown session" in proc.stderr and "Traceback" not in proc.stderr
    assert _ccotel(config, tmp_path, "trace", real).returncode == 0


def test_doctor_names_them_escaped_in_text_and_json(root, tmp_path):
    config, _real, _bad = root
    proc = _ccotel(config, tmp_path, "doctor", "--json", "--traces-exporter", "none")
    findings = [f for f in json.loads(proc.stdout)["findings"] if f.get("data", {}).get("not_utf8")]
    assert len(findings) == 1 and findings[0]["level"] == "warn"
    assert sorted(p.rsplit("/", 1)[-1] for p in findings[0]["data"]["not_utf8"]) == ["-home-caf\\xe9-proj",
                                                                                   "caf\\xe9.jsonl"]
    text = _ccotel(config, tmp_path, "doctor", "--traces-exporter", "none")
    assert "Traceback" not in text.stderr and "caf\\xe9.jsonl" in text.stdout


@pytest.mark.parametrize("argv", [("backfill", "--traces-exporter", "none"), ("report",), ("sessions",)])
def test_a_root_that_is_not_utf8_is_a_usage_error(tmp_path, argv):
    root = os.fsencode(tmp_path) + b"/claude-" + BAD_DIR
    os.makedirs(root + b"/projects")
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", os.fsdecode(root)], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "is not UTF-8: " in proc.stderr and "caf\\xe9" in proc.stderr, proc.stderr
    assert not (tmp_path / "xdg").exists()  # refused before any work
