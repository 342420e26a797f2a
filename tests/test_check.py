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


def test_one_ghost_rule_for_check_and_the_pipeline(tmp_path):
    """A session whose only reply is a failed API call (a <synthetic> API-error line) is not a ghost:
    the CLI reached the API and wrote its answer. check and the pipeline's detector ask the same
    rule (rules.is_assistant_record), so they agree on every kind of session (found in review:
    check called it a ghost, the pipeline did not)."""
    import time

    import orjson

    from ccotel.export import ExportQueue, make_sink
    from ccotel.metrics import Metrics
    from ccotel.pipeline import Options, Pipeline
    from ccotel.state import Commit, State

    root = tmp_path / "claude"
    proj = root / "projects" / "-p"
    proj.mkdir(parents=True)

    def write(sid: str, *extra: dict) -> None:
        lines = [{"type": "user", "uuid": f"{sid[:8]}-u", "parentUuid": None, "sessionId": sid,
                  "timestamp": "2025-01-01T00:00:00.000Z", "message": {"role": "user", "content": "hello?"}}, *extra]
        (proj / f"{sid}.jsonl").write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in lines))

    ghost, failed, answered = (f"{c * 8}-1111-4222-8333-444444444444" for c in "abc")
    write(ghost)
    write(failed, {"type": "assistant", "uuid": "f-a", "parentUuid": f"{failed[:8]}-u", "sessionId": failed,
                   "timestamp": "2025-01-01T00:00:01.000Z", "isApiErrorMessage": True, "madeBy": "model",
                   "message": {"id": "0b0b0b0b-0000-4000-8000-000000000000", "model": "<synthetic>",
                               "role": "assistant",
                               "content": [{"type": "text", "text": "API Error: 529 overloaded"}],
                               "usage": {"input_tokens": 0, "output_tokens": 0}}})
    write(answered, {"type": "assistant", "uuid": "c-a", "parentUuid": f"{answered[:8]}-u", "sessionId": answered,
                     "timestamp": "2025-01-01T00:00:01.000Z", "requestId": "req_1",
                     "message": {"id": "msg_1", "model": "claude-opus-5", "role": "assistant",
                                 "stop_reason": "end_turn",
                                 "content": [{"type": "text", "text": "hi"}],
                                 "usage": {"input_tokens": 1, "output_tokens": 1}}})
    verdicts = {sid: check_session(sid, (str(root),)).has_assistant_record for sid in (ghost, failed, answered)}
    assert verdicts == {ghost: False, failed: True, answered: True}

    state_dir = tmp_path / "state"
    State(str(state_dir)).commit(Commit(marks=[("caught_up", 0)]))  # a restart: events are counted
    now = [time.time_ns()]
    metrics, queue = Metrics(), ExportQueue(make_sink("none"))
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=State(str(state_dir)),
                        metrics=metrics, clock=lambda: now[0])
    queue.on_ack = pipeline.acknowledge
    pipeline.backfill()
    now[0] += 10 * 60 * 10 ** 9  # past the stall timeout
    pipeline.tick()
    queue.close(timeout_s=10)
    ghosts = metrics.value("ccotel_missing_transcripts", "session")
    assert ghosts == sum(1 for has in verdicts.values() if not has) == 1


def test_a_stale_sessions_file_beside_the_live_one_is_not_death(tmp_path):
    """2.1.3xx keeps a killed process's sessions/<pid>.json after a resume (harness NOTES, s06):
    the session runs if any of its processes does, whichever file is listed first."""
    import os

    from ccotel.procs import any_alive, read_session_pids

    d = tmp_path / "claude" / "sessions"
    d.mkdir(parents=True)
    sid = "dddddddd-1111-4222-8333-444444444444"
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    (d / "1.json").write_text(json.dumps({"pid": 2 ** 22 + 7, "sessionId": sid, "procStart": "1"}))  # dead
    (d / f"{os.getpid()}.json").write_text(json.dumps({"pid": os.getpid(), "sessionId": sid, "procStart": start}))
    procs = read_session_pids((str(tmp_path / "claude"),))
    assert len(procs[sid]) == 2 and any_alive(procs[sid])
    (d / f"{os.getpid()}.json").unlink()
    assert not any_alive(read_session_pids((str(tmp_path / "claude"),))[sid])
