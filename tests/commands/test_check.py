"""ccotel check on real-CLI fixtures: the killed session is not resumable, a normal one is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.commands.check import CheckError, check_session
from tests.harness.fixtures import load_fixture


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccotel", "check", *args], capture_output=True, text=True, timeout=60)


def real_copy(scenario: str, tmp_path: Path, version: str | None = None, snapshot: str | None = None,
              cwd: bool = True) -> tuple[Path, str, Path]:
    """A writable copy of a real-CLI fixture's config dir (or a snapshot of it): (root, session id,
    main transcript). ``cwd``: the recorded cwd (a sandbox long gone) is rewritten to one that exists."""
    fx = load_fixture(scenario, version=version)
    root = tmp_path / "claude"
    shutil.copytree(fx.snapshots[snapshot] if snapshot else fx.config_dir, root)
    sid = fx.session_ids[0]
    main = next(root.glob(f"projects/*/{sid}.jsonl"))
    if cwd:
        (tmp_path / "proj").mkdir(exist_ok=True)
        old, new = json.dumps(fx.meta["cwd"])[1:-1], json.dumps(str(tmp_path / "proj"))[1:-1]
        main.write_text(main.read_text().replace(f'"cwd":"{old}"', f'"cwd":"{new}"'))
    return root, sid, main


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


def test_finished_session_is_resumable(tmp_path):
    root, sid, _ = real_copy("s01_bash_tool", tmp_path)  # its cwd made to exist: nothing else edited
    proc = run_check(sid, "--root", str(root), "--json")
    assert proc.returncode == 0, proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["resumable"] is True and doc["findings"] == [] and doc["probes"] == 1


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

    from ccotel.export.sinks import ExportQueue, make_sink
    from ccotel.metrics.counters import Metrics
    from ccotel.run.pipeline import Options, Pipeline
    from ccotel.store.sqlite import SqliteState as State
    from ccotel.store.state import Commit

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

    from ccotel.read.procs import any_alive, read_session_pids

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


# -- findings: each code on real fixture data, minimally edited in a tmp copy ------------------------

DANGLING = "00000000-dead-4bad-8bad-000000000000"


def lines_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write_lines(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def codes(h) -> dict[str, bool]:
    return {f.code.value: f.blocks for f in h.findings}


def set_version(lines: list[dict], version: str) -> list[dict]:
    return [{**x, "version": version} if "version" in x else x for x in lines]


def test_the_fixture_as_recorded_has_lost_its_cwd(tmp_path):
    root, sid, _ = real_copy("s01_bash_tool", tmp_path, cwd=False)  # the sandbox it ran in is gone
    h = check_session(sid, (str(root),))
    assert codes(h) == {"cwd_missing": True} and not h.resumable
    assert "no such directory" in h.findings[0].evidence[0]


@pytest.mark.parametrize("version,blocks", [("2.1.197", True), ("2.1.330", False)])
def test_trailing_orphan_blocks_only_where_resume_does_not_repair_it(tmp_path, version, blocks):
    """2.1.197 leaves the orphan as a dead branch; 2.1.330's resume writes its result (harness s06)."""
    root, sid, _ = real_copy("s06_kill_orphan_resume", tmp_path, version=version, snapshot="after_kill")
    h = check_session(sid, (str(root),))
    assert codes(h) == {"trailing_orphaned_tool_use": blocks} and h.resumable is not blocks
    assert h.ends_in_orphaned_tool_use and h.process == "gone" and h.version == version


@pytest.mark.parametrize("version", ["2.1.197", "2.1.330"])
def test_broken_parent_chain(tmp_path, version):
    """The last assistant line's parent removed: both pinned CLIs resumed such a file with its whole
    history (NOTES: resume blockers), so it warns; on a version before 2.1.197 it blocks."""
    root, sid, main = real_copy("s01_bash_tool", tmp_path, version=version)
    lines = lines_of(main)
    last = max(i for i, x in enumerate(lines) if x["type"] == "assistant")
    lines[last]["parentUuid"] = DANGLING
    write_lines(main, lines)
    h = check_session(sid, (str(root),))
    assert codes(h) == {"broken_parent_chain": False} and h.resumable
    assert f"line {lines[last]['uuid']} -> parent {DANGLING}" in h.findings[0].evidence
    write_lines(main, set_version(lines, "2.1.143"))
    assert codes(check_session(sid, (str(root),))) == {"broken_parent_chain": True}


@pytest.mark.parametrize("version", ["2.1.197", "2.1.330"])
def test_compact_boundary_with_a_missing_logical_parent(tmp_path, version):
    root, sid, main = real_copy("s10_compact", tmp_path, version=version)
    assert codes(check_session(sid, (str(root),))) == {}  # as recorded: the logical parent is there
    lines = lines_of(main)
    for x in lines:
        if x.get("subtype") == "compact_boundary":
            x["logicalParentUuid"] = DANGLING
    write_lines(main, lines)
    assert codes(check_session(sid, (str(root),))) == {"compact_logical_parent_missing": False}
    write_lines(main, set_version(lines, "2.1.143"))
    assert codes(check_session(sid, (str(root),))) == {"compact_logical_parent_missing": True}


def test_first_line_not_a_message(tmp_path):
    """A -p transcript starts with queue-operation (fine); a pr-link first line made 2.1.143 answer
    "No conversation found" (anthropics/claude-code#62851); 2.1.330 resumes it."""
    root, sid, main = real_copy("s01_bash_tool", tmp_path, version="2.1.330")
    lines = lines_of(main)
    assert lines[0]["type"] == "queue-operation"
    pr = {"type": "pr-link", "sessionId": sid, "prNumber": 7, "prUrl": "https://github.com/o/r/pull/7",
          "prRepository": "o/r", "timestamp": lines[0]["timestamp"]}
    write_lines(main, [pr, *lines])
    h = check_session(sid, (str(root),))
    assert codes(h) == {"first_line_not_message": False} and "'pr-link'" in h.findings[0].message
    assert "resumes it with the whole history" in h.findings[0].message  # what a resume does (issue 28)
    write_lines(main, [pr, *set_version(lines, "2.1.143")])
    old = check_session(sid, (str(root),))
    assert codes(old) == {"first_line_not_message": True}
    assert 'may answer "No conversation found"' in old.findings[0].message


def test_worktree_gone_and_relocated(tmp_path):
    """worktree-state and relocated lines as a real 2.1.x transcript writes them (realdata, wakil)."""
    root, sid, main = real_copy("s01_bash_tool", tmp_path, version="2.1.330")
    tree = tmp_path / "proj" / ".claude" / "worktrees" / "fix"
    ws = {"type": "worktree-state", "sessionId": sid, "worktreeSession": {
        "originalCwd": str(tmp_path / "proj"), "worktreePath": str(tree), "worktreeName": "fix"}}
    write_lines(main, [*lines_of(main), ws])
    h = check_session(sid, (str(root),))
    assert codes(h) == {"worktree_missing": True}
    assert h.findings[0].evidence == (f"worktree-state.worktreeSession.worktreePath {tree}: no such directory",)
    tree.mkdir(parents=True)
    write_lines(main, [*lines_of(main), {"type": "relocated", "sessionId": sid, "relocatedCwd": str(tree)}])
    h = check_session(sid, (str(root),))
    assert codes(h) == {"transcript_relocated": False} and h.resumable


def _proc_start(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def test_live_process_and_two_writers(tmp_path):
    """sessions/<pid>.json as 2.1.330 wrote it (s06 after_kill), pointed at live processes."""
    import os

    root, sid, _ = real_copy("s06_kill_orphan_resume", tmp_path, version="2.1.330", snapshot="after_kill")
    sessions = root / "sessions"
    recorded = json.loads(next(sessions.glob("*.json")).read_text())
    for f in sessions.iterdir():
        f.unlink()
    me = os.getpid()
    (sessions / f"{me}.json").write_text(json.dumps({**recorded, "pid": me, "procStart": _proc_start(me)}))
    h = check_session(sid, (str(root),))
    assert codes(h) == {"session_live": True} and h.process == "running"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (sessions / f"{other.pid}.json").write_text(json.dumps({**recorded, "pid": other.pid,
                                                                 "procStart": _proc_start(other.pid)}))
        h = check_session(sid, (str(root),))
        assert codes(h) == {"concurrent_writers": True} and len(h.findings[0].evidence) == 2
    finally:
        other.kill()
        other.wait(timeout=10)
    assert codes(check_session(sid, (str(root),))) == {"session_live": True}  # the other one is gone


# -- the flush race -----------------------------------------------------------------------------------

def _cut_before_first_answer(main: Path) -> bytes:
    """Truncate a real transcript before its first assistant line; return the bytes cut."""
    data = main.read_bytes()
    lines = data.splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if json.loads(x)["type"] == "assistant")
    main.write_bytes(b"".join(lines[:first]))
    return b"".join(lines[first:])


def test_probe_times_are_0_50_150_ms(tmp_path):
    root, sid, main = real_copy("s01_bash_tool", tmp_path)
    _cut_before_first_answer(main)
    t = [100.0]
    reads: list[float] = []

    def sleep(s: float) -> None:
        t[0] += s
        reads.append(round(t[0] - 100.0, 3))

    h = check_session(sid, (str(root),), sleep=sleep, clock=lambda: t[0])
    assert reads == [0.0, 0.05, 0.15] and h.probes == 3
    assert codes(h)["no_assistant_record"] is True  # (and stalled: the prompt is days old)
    assert h.findings[0].evidence[0].endswith("after 3 reads at 0, 50, 150 ms")


def test_a_line_written_100ms_after_check_starts_is_found(tmp_path):
    import threading
    import time

    root, sid, main = real_copy("s01_bash_tool", tmp_path)
    rest = _cut_before_first_answer(main)
    start = time.monotonic()

    def append() -> None:
        time.sleep(max(start + 0.1 - time.monotonic(), 0))
        with open(main, "ab") as f:
            f.write(rest)

    writer = threading.Thread(target=append)
    writer.start()
    h = check_session(sid, (str(root),), clock=lambda: start)  # probes measured from the same start
    writer.join()
    took = time.monotonic() - start
    assert h.has_assistant_record and h.resumable and h.probes == 3, (h.probes, took)
    assert 0.15 <= took < 2.0


def test_nothing_within_150ms_is_a_finding(tmp_path):
    import time

    root, sid, main = real_copy("s01_bash_tool", tmp_path)
    _cut_before_first_answer(main)
    start = time.monotonic()
    h = check_session(sid, (str(root),))
    assert 0.15 <= time.monotonic() - start < 2.0
    assert codes(h)["no_assistant_record"] is True and h.probes == 3


# -- a session known on disk without its transcript ----------------------------------------------------

def absent_root(tmp_path: Path, kind: str) -> tuple[Path, str, int]:
    """(root, session id, now_ns) of real leftovers without the transcript. not_persisted: what a killed
    --no-session-persistence run leaves (NOTES: a sessions/<pid>.json, an empty session-env/<id>/; the
    s06 kill's real sessions file, its transcript removed). swept: the same, 40 days later. missing: a
    session with subagents whose main file is gone the same day (s03: <id>/subagents remains)."""
    import os

    if kind == "missing":
        root, sid, main = real_copy("s03_parallel_subagents", tmp_path, version="2.1.330", cwd=False)
        main.unlink()
        when = max(p.stat().st_mtime for p in root.rglob("*.jsonl"))
        return root, sid, int((when + 3600) * 1e9)
    root, sid, main = real_copy("s06_kill_orphan_resume", tmp_path, version="2.1.330", snapshot="after_kill",
                                cwd=False)
    main.unlink()
    (root / "session-env" / sid).mkdir(parents=True)
    doc = json.loads(next((root / "sessions").glob("*.json")).read_text())
    seen = max(doc["startedAt"], doc["updatedAt"]) / 1000
    os.utime(root / "session-env" / sid, (seen, seen))
    days = 40 if kind == "swept" else 0.01
    return root, sid, int((seen + days * 86400) * 1e9)


@pytest.mark.parametrize("kind,code", [("not_persisted", "transcript_not_persisted"),
                                       ("swept", "transcript_swept"), ("missing", "transcript_missing")])
def test_absent_transcript_says_why(tmp_path, kind, code):
    root, sid, now_ns = absent_root(tmp_path, kind)
    h = check_session(sid, (str(root),), now_ns=now_ns)
    assert codes(h) == {code: True} and h.path == "" and not h.resumable
    assert any("cleanupPeriodDays 30" == e for e in h.findings[0].evidence)
    assert any(str(root) in e for e in h.findings[0].evidence)  # the files it went by


def test_unknown_session_is_still_refused(tmp_path):
    root, _, _ = real_copy("s01_bash_tool", tmp_path)
    assert run_check("abcdefab-1111-4222-8333-444444444444", "--root", str(root)).returncode == 2


def test_cli_json_keeps_the_old_fields_and_adds_findings(tmp_path):
    root, sid, _ = real_copy("s06_kill_orphan_resume", tmp_path, snapshot="after_kill")
    doc = json.loads(run_check(sid, "--root", str(root), "--json").stdout)
    for key in ("session_id", "path", "lines", "has_assistant_record", "ends_in_orphaned_tool_use",
                "orphaned_tool_use_ids", "stalled", "process", "idle_seconds", "bad_lines", "problems", "resumable"):
        assert key in doc
    f = doc["findings"][0]
    assert f["code"] == "trailing_orphaned_tool_use" and f["severity"] == "blocks_resume" and f["blocks_resume"]
    assert doc["problems"] == [f["message"]]


def test_the_8_character_id_sessions_prints_is_taken_and_unknown_or_ambiguous_are_said(tmp_path):
    """`ccotel check a1d982a6` (the id `ccotel sessions` prints): the same prefix rule as `ccotel trace`."""
    fx = load_fixture("s01_bash_tool")
    root = tmp_path / "claude"
    shutil.copytree(fx.config_dir, root)
    sid = fx.session_ids[0]
    whole = check_session(sid, (str(root),))
    short = check_session(sid[:8], (str(root),))
    assert short.session_id == whole.session_id == sid and short.path == whole.path
    assert run_check(sid[:8], "--root", str(root)).returncode in (0, 1)  # a verdict, not a refusal
    unknown = run_check("0123abcd", "--root", str(root))
    assert unknown.returncode == 2 and "unknown session 0123abcd" in unknown.stderr
    main = next(root.glob(f"projects/*/{sid}.jsonl"))
    twin = sid[:9] + "ffff" + sid[13:]
    shutil.copy(main, main.with_name(f"{twin}.jsonl"))
    amb = run_check(sid[:8], "--root", str(root))
    assert amb.returncode == 2 and f"ambiguous: {sid[:8]} matches {', '.join(sorted([sid, twin]))}" in amb.stderr


def test_idle_time_reads_as_days_and_hours():
    """Issue 28: `idle 8612756s`. Readable, with the seconds --json gives (idle_seconds)."""
    from ccotel.commands.check import _idle

    assert [_idle(x) for x in (5.4, 125, 7384, 8612756.9)] == \
        ["5s", "2m 05s (125 s)", "2h 03m (7384 s)", "99d 16h (8612756 s)"]
