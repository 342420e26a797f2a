"""ccotel check on real-CLI fixtures: the killed session is not resumable, a normal one is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ccotel.check import CheckError, check_session
from tests.harness.fixtures import load_fixture


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccotel", "check", *args], capture_output=True, text=True, timeout=60)


def test_killed_session_ends_in_an_orphan_and_exits_1(tmp_path):
    fx = load_fixture("s06_kill_orphan_resume")
    root = tmp_path / "claude"
    shutil.copytree(fx.snapshots["after_kill"], root)  # the transcript as the kill left it, with sessions/<pid>.json
    sid = fx.session_ids[0]
    proc = run_check(sid, "--root", str(root), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ends_in_orphaned_tool_use"] is True and doc["resumable"] is False
    assert doc["process"] == "gone" and doc["has_assistant_record"] is True
    assert len(doc["orphaned_tool_use_ids"]) == 1
    human = run_check(sid, "--root", str(root))
    assert human.returncode == 1 and "do NOT resume" in human.stdout


def test_finished_session_is_resumable():
    fx = load_fixture("s01_bash_tool")
    proc = run_check(fx.session_ids[0], "--root", str(fx.config_dir), "--json")
    assert proc.returncode == 0, proc.stdout
    assert json.loads(proc.stdout)["resumable"] is True


def test_ghost_session_is_not_resumable(tmp_path):
    root = tmp_path / "claude"
    (root / "projects" / "-p").mkdir(parents=True)
    sid = "eeeeeeee-1111-4222-8333-444444444444"
    (root / "projects" / "-p" / f"{sid}.jsonl").write_text(json.dumps(
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": sid, "timestamp": "2025-01-01T00:00:00.000Z",
         "message": {"role": "user", "content": "hello?"}}) + "\n")
    h = check_session(sid, (str(root),))
    assert not h.resumable and not h.has_assistant_record


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "a", "x;rm -rf", "..", "%2e%2e"])
def test_path_like_or_malformed_ids_are_refused(tmp_path, bad):
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    with pytest.raises(CheckError):
        check_session(bad, (str(tmp_path / "claude"),))
    assert run_check(bad, "--root", str(tmp_path / "claude")).returncode == 2


def test_symlink_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "claude"
    (root / "projects" / "-p").mkdir(parents=True)
    outside = tmp_path / "secret.jsonl"
    outside.write_text("{}\n")
    sid = "ffffffff-1111-4222-8333-444444444444"
    (root / "projects" / "-p" / f"{sid}.jsonl").symlink_to(outside)
    with pytest.raises(CheckError):
        check_session(sid, (str(root),))
