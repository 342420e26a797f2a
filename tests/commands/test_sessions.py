"""``ccotel sessions``: the recent sessions under the roots, on the real-CLI fixtures of both versions.

Cross-checks: the token, call and cost figures of each session equal ``ccotel report``'s fast
reader (report.build_report, which reads the assistant lines alone); the turns equal the turn
spans the exporter builds; the state follows ``ccotel check``'s verdict and the pipeline's turn
outcomes for what each scenario did (a kill, an interrupt, an API error, a live process, a ghost).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

from ccotel.commands import sessions
from ccotel.commands.check import check_session
from ccotel.commands.options import parse_since, price_file
from ccotel.commands.report.transcripts import build_report
from ccotel.run.pipeline import Options
from tests.commands.test_waterfall import exported, live_copy
from tests.harness.fixtures import list_fixtures, load_fixture

# What each scenario's last session ends in (tests/harness/scenarios.py): the rest end idle.
EXPECTED_STATE = {"s11_interrupt": "interrupted"}


def parser() -> argparse.ArgumentParser:
    """The parser cli.py builds for ``ccotel sessions`` (cli.py's common options, then ours)."""
    p = argparse.ArgumentParser(prog="ccotel sessions")
    p.add_argument("--root", action="append", default=None)
    p.add_argument("--since", type=parse_since, default=None)
    p.add_argument("--prices", type=price_file, default=None)
    p.add_argument("-v", "--verbose", action="store_true")
    sessions.add_arguments(p)
    return p


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = sessions.run(parser().parse_args(list(argv)))
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def all_roots() -> list[str]:
    return [str(load_fixture(n).config_dir) for n in list_fixtures()]


@pytest.fixture(scope="module")
def listed(all_roots: list[str]) -> list[sessions.SessionSummary]:
    return sessions.list_sessions(Options(roots=tuple(all_roots)), limit=None)


def test_every_session_is_listed_newest_first(listed: list[sessions.SessionSummary]) -> None:
    ids = [sid for n in list_fixtures() for sid in load_fixture(n).session_ids]
    assert sorted(s.session_id for s in listed) == sorted(ids)
    assert [s.last_ns for s in listed] == sorted((s.last_ns for s in listed), reverse=True)
    assert all(s.first_ns is not None and s.first_ns <= s.last_ns for s in listed)


def test_figures_equal_ccotel_report(all_roots: list[str], listed: list[sessions.SessionSummary]) -> None:
    report = build_report(Options(roots=tuple(all_roots)), workers=1)
    for s in listed:
        r = report.get(s.session_id)
        if r is None:  # a session whose only call failed: nothing billed, nothing reported
            assert (s.api_calls, s.output_tokens, s.api_errors) == (0, 0, 1), s
            continue
        assert (s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.api_calls) == \
            (r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_creation_tokens, r.api_calls), s.session_id
        assert s.cost_usd == pytest.approx(r.cost_usd, rel=1e-9)
        assert set(s.models) == r.models


@pytest.mark.parametrize("name", list_fixtures())
def test_turns_version_project_and_state(name: str, listed: list[sessions.SessionSummary]) -> None:
    fx = load_fixture(name)
    by_id = {s.session_id: s for s in listed}
    for sid in fx.session_ids:
        s = by_id[sid]
        reference = exported(fx.config_dir, sid)
        roots = sorted((r for r in reference if r.parent_span_id is None), key=lambda r: r.start_ns)
        assert s.turns == len(roots) and s.open_turns == 0
        assert s.last_outcome == roots[-1].attributes["claude_code.turn.outcome"]
        assert s.versions[-1] == fx.version
        assert s.cwd == fx.meta["cwd"] and s.project == Path(s.path).parent.name
        assert s.path.startswith(str(fx.config_dir))
    last = by_id[fx.session_ids[-1]]
    calls = [r for r in exported(fx.config_dir, last.session_id)
             if r.trace_id == max(exported(fx.config_dir, last.session_id), key=lambda r: r.start_ns).trace_id
             and r.attributes.get("gen_ai.operation.name") == "chat"]
    ends_failed = bool(calls) and "error.type" in max(calls, key=lambda r: r.start_ns).attributes
    want = EXPECTED_STATE.get(fx.scenario, "api_error" if ends_failed else "idle")
    assert last.state == want, (name, last)
    health = check_session(last.session_id, (str(fx.config_dir),))
    assert last.process == health.process and list(last.problems) == health.problems


def test_a_session_that_only_failed_is_api_error(listed: list[sessions.SessionSummary]) -> None:
    """s07's first run got a non-retryable 400 and nothing else (the fake API's log says so)."""
    for name in ("s07_api_errors", "2.1.330-s07_api_errors"):
        fx = load_fixture(name)
        statuses = [c["status"] for c in fx.ground_truth]
        assert statuses[0] == 400
        first = next(s for s in listed if s.session_id == fx.session_ids[0])
        assert first.state == "api_error" and first.api_errors == 1 and first.api_calls == 0


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_killed_then_resumed(name: str, tmp_path: Path) -> None:
    fx = load_fixture(name)
    root = tmp_path / "claude"
    shutil.copytree(fx.snapshots["after_kill"], root)
    (after_kill,) = sessions.list_sessions(Options(roots=(str(root),)))
    assert after_kill.state == "killed" and after_kill.process == "gone"
    assert after_kill.last_outcome == "killed" and after_kill.tool_errors == 1
    # the orphaned tool_use is a problem where a resume does not repair it (check's rule: 2.1.3xx repairs)
    assert any("orphaned tool_use" in p for p in after_kill.problems) == (fx.version != "2.1.330")
    (resumed,) = sessions.list_sessions(Options(roots=(str(fx.config_dir),)))
    # the first turn: 2.1.3xx's resume writes a repair saying the process died; 2.1.197 leaves a dead branch
    first = "killed" if fx.version == "2.1.330" else "orphaned"
    assert resumed.state == "idle" and resumed.turns == 2
    assert resumed.outcomes == {first: 1, "completed": 1} and resumed.last_outcome == "completed"


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_live(name: str, tmp_path: Path) -> None:
    root, sid = live_copy(name, tmp_path)
    (s,) = sessions.list_sessions(Options(roots=(str(root),)))
    assert s.session_id == sid and s.state == "live" and s.process == "running"
    assert s.open_turns == 1 and s.last_outcome == "open" and s.tool_errors == 0


def test_ghost(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects" / "-p").mkdir(parents=True)
    sid = "eeeeeeee-1111-4222-8333-444444444444"
    (root / "projects" / "-p" / f"{sid}.jsonl").write_bytes(orjson.dumps(
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": sid, "timestamp": "2025-01-01T00:00:00.000Z",
         "cwd": "/work/p", "version": "2.1.330", "message": {"role": "user", "content": "hello?"}}) + b"\n")
    (s,) = sessions.list_sessions(Options(roots=(str(root),)))
    assert s.state == "ghost" and s.api_calls == 0 and s.turns == 1
    assert not check_session(sid, (str(root),)).has_assistant_record  # the same verdict as check's


def test_since_limit_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--since is the turns' start time, not the files' mtime (issue 28: a copy's mtime is the copy's
    time, so `--since 7d` listed every old session); an empty result says since when."""
    root = tmp_path / "claude"
    for name in ("s01_bash_tool", "s02_resume_two_turns", "2.1.330-s03_parallel_subagents"):
        shutil.copytree(load_fixture(name).config_dir, root, dirs_exist_ok=True)
    old = load_fixture("s01_bash_tool").session_ids[0]  # its turn starts 2026-11-21T05:31:38Z, s02's 05:32:46
    rc, out = run(capsys, "--root", str(root), "--json", "--limit", "0")
    assert rc == 0
    everything = json.loads(out)["sessions"]
    assert len(everything) == 3
    assert [s["lastActivityNs"] for s in everything] == sorted((s["lastActivityNs"] for s in everything), reverse=True)
    rc, out = run(capsys, "--root", str(root), "--json", "--since", "2026-11-21T05:32:00Z")  # every mtime is now
    assert {s["sessionId"] for s in json.loads(out)["sessions"]} == {s["sessionId"] for s in everything} - {old}
    ten_days = time.time() - 10 * 86400
    for path in root.rglob("*"):  # a file last written before --since holds no turn started since: not read
        if old in str(path):
            os.utime(path, (ten_days, ten_days))
    rc, out = run(capsys, "--root", str(root), "--json", "--since", "2026-11-21T05:00:00Z")
    assert {s["sessionId"] for s in json.loads(out)["sessions"]} == {s["sessionId"] for s in everything} - {old}
    rc, out = run(capsys, "--root", str(root), "--since", "2027-01-01")
    assert rc == 0 and out.strip() == f"no sessions since 2027-01-01 00:00 UTC under {root}"
    rc, out = run(capsys, "--root", str(root), "--limit", "1", "--width", "120")
    assert out.splitlines()[-1] == "1 of 3 sessions (--limit 0: all)"
    rc, out = run(capsys, "--root", str(root), "--json", "--limit", "1")
    (one,) = json.loads(out)["sessions"]
    keys = {"sessionId", "shortId", "project", "cwd", "path", "start", "lastActivity", "versions", "models", "turns",
            "openTurns", "outcomes", "apiCalls", "apiErrors", "toolCalls", "toolErrors", "subagents", "inputTokens",
            "outputTokens", "cacheReadTokens", "cacheCreationTokens", "totalCost", "state", "process", "problems"}
    assert keys <= set(one)


@pytest.mark.parametrize("width", [100, 160])
def test_table_fits_and_its_ids_resolve(width: int, all_roots: list[str], listed: list[sessions.SessionSummary],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for r in all_roots for a in ("--root", r)]
    rc, out = run(capsys, *args, "--limit", "0", "--width", str(width))
    assert rc == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    left_out = [line for line in lines if line.startswith("not shown at this width:")]
    assert len(lines) == 1 + len(listed) + len(left_out)
    header = lines[0].split()
    assert header[:2] == ["session", "project"] and header[-1] == "state"
    assert ("model" in header) == (not left_out)
    for line, s in zip(lines[1:1 + len(listed)], listed, strict=True):
        cells = line.split()
        assert cells[0] == s.short_id and cells[-1] == s.state
        assert sessions.find_session(s.short_id, all_roots).session_id == s.session_id  # what `ccotel trace` takes
        assert f"${s.cost_usd:.2f}" in line


def test_no_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(capsys, "--root", str(tmp_path / "nothing"))
    assert rc == 0 and out.strip() == f"no sessions under {tmp_path / 'nothing'}"
    rc, out = run(capsys, "--root", str(tmp_path / "nothing"), "--json")
    assert rc == 0 and json.loads(out) == {"sessions": []}


def test_a_limited_listing_is_the_newest_by_the_transcripts_own_times(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A copy or a restore sets mtimes that say nothing of a session's last activity: `--limit N`
    shows the N newest by the transcripts' times, the first N of the whole listing."""
    root = tmp_path / "claude"
    for name in ("s01_bash_tool", "s02_resume_two_turns", "2.1.330-s03_parallel_subagents"):
        shutil.copytree(load_fixture(name).config_dir, root, dirs_exist_ok=True)
    rc, out = run(capsys, "--root", str(root), "--json", "--limit", "0")
    everything = [s["sessionId"] for s in json.loads(out)["sessions"]]
    for age, sid in enumerate(everything):  # the newest session gets the oldest mtime
        when = time.time() - 86400 * (len(everything) - age)
        for path in root.rglob(f"*{sid}*"):
            os.utime(path, (when, when))
    for n in (1, 2):
        rc, out = run(capsys, "--root", str(root), "--json", "--limit", str(n))
        assert [s["sessionId"] for s in json.loads(out)["sessions"]] == everything[:n]
