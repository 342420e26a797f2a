"""``ccotel statusline`` from the JSON Claude Code documents for its ``statusLine`` command (session_id,
transcript_path, model, cost, rate_limits), on the transcripts the real CLI wrote (tests/fixtures):
the session's figures equal the report's, read at once or as the file grows; Claude Code's own
figure beside ccotel's where they differ (a resumed 2.1.197 session, a compaction); today and the
active block from a ledger the pipeline wrote; what is wrong; never a failure; NO_COLOR; the
roots; and the imports of ``python -m ccotel statusline``."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.commands.report.transcripts import build_report
from ccotel.commands.statusline.line import main, parse_options, status_line
from ccotel.commands.statusline.session import read_session
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import LEDGER_FILE, Ledger
from ccotel.store.ledger_peek import LEDGER_FILE as PEEK_LEDGER_FILE
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.ccusage import realdata_layout
from tests.support.fixtures import realdata_config_dir  # noqa: F401
from tests.support_selftest.test_support_ccusage import ADVISOR_SESSION

REPO = Path(__file__).resolve().parents[2]
MIN = 60 * 1_000_000_000


def _sessions(config: Path) -> list[tuple[str, Path]]:
    return [(p.stem, p) for p in sorted((config / "projects").glob("*/*.jsonl"))]


def _results(name: str) -> list[dict]:
    """The stream-json ``result`` records of a fixture's runs (total_cost_usd: Claude Code's own
    cost of the session, the figure its status line JSON carries as cost.total_cost_usd)."""
    out = []
    for path in sorted((load_fixture(name).config_dir.parent / "runs").glob("*/stdout.jsonl")):
        for line in path.read_text().splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if obj.get("type") == "result":
                out.append(obj)
    return out


def _cli_json(sid: str, transcript: Path, cost: float | None = None, **extra) -> dict:
    doc = {"session_id": sid, "transcript_path": str(transcript), "model": {"id": "claude-opus-5-5",
           "display_name": "Opus 5.5"}, "workspace": {"current_dir": "/w", "project_dir": "/w"}}
    if cost is not None:
        doc["cost"] = {"total_cost_usd": cost, "total_duration_ms": 1000}
    doc.update(extra)
    return doc


NOT_SPLIT = ("s13_advisor",)  # advisor iterations: the report prices them under the advisor's model


@pytest.mark.parametrize("name", [n for n in list_fixtures() if not n.endswith(NOT_SPLIT)])
def test_the_sessions_figures_equal_the_reports_read_at_once_or_as_it_grows(name, tmp_path):
    """Cost and tokens of each session with its subagents equal ``ccotel report``'s, whether the
    files are read at once, again from the cache, or line by line as they are written."""
    config = load_fixture(name).config_dir
    report = build_report(Options(roots=(str(config),)))
    for sid, path in _sessions(config):
        want = report.get(sid)
        if want is None or not want.api_calls:
            continue
        whole = read_session(str(path), sid, str(tmp_path / f"{sid}.json"))
        again = read_session(str(path), sid, str(tmp_path / f"{sid}.json"))
        for got in (whole, again):
            assert sum(c[1] + c[2] + c[3] + c[4] for c in got.calls.values()) == want.total_tokens, sid
            assert sum(c[9] or 0.0 for c in got.calls.values()) == pytest.approx(want.cost_usd, abs=1e-6), sid
        # the same files written a few lines at a time (every file of the session grows)
        grow = tmp_path / "grow" / "claude"
        shutil.rmtree(grow.parent, ignore_errors=True)
        shutil.copytree(config, grow)
        files = [f for f in grow.rglob("*.jsonl")]
        full = {f: f.read_bytes() for f in files}
        for f in files:
            f.write_bytes(b"")
        cache = tmp_path / "grow-cache.json"
        cache.unlink(missing_ok=True)
        step = 0
        while any(f.stat().st_size < len(full[f]) for f in files):
            step += 1
            for f in files:
                lines = full[f].splitlines(keepends=True)
                f.write_bytes(b"".join(lines[: step * 3]) + (lines[step * 3][:7] if step * 3 < len(lines) else b""))
            read_session(str(next(grow.glob(f"projects/*/{sid}.jsonl"))), sid, str(cache))
        grown = read_session(str(next(grow.glob(f"projects/*/{sid}.jsonl"))), sid, str(cache))
        assert sum(c[9] or 0.0 for c in grown.calls.values()) == pytest.approx(want.cost_usd, abs=1e-6), sid
        assert set(grown.calls) == set(whole.calls)


def _line(doc: dict, root: Path, state: str = "none", now_ns: int = 0, color: bool = False) -> str:
    return status_line(doc, parse_options(["--root", str(root), "--state", state]), now_ns or 1, color)


def test_claude_codes_own_figure_is_shown_beside_where_it_differs():
    """What Claude Code's cost leaves out or adds, from its own result records: with subagents it
    equals ccotel's (one figure shown); after a resume on 2.1.197 it counts this process's calls
    only; with a compaction it counts the summary call the transcript holds no usage for."""
    name = "2.1.330-s03_parallel_subagents"
    config = load_fixture(name).config_dir
    (sid, path), = _sessions(config)
    cc = _results(name)[-1]["total_cost_usd"]
    line = _line(_cli_json(sid, path, cc), config)
    assert re.search(r"session \$0\.16 \d+k tok", line) and "Claude Code" not in line, line

    name = "s02_resume_two_turns"  # 2.1.197
    config = load_fixture(name).config_dir
    (sid, path), = _sessions(config)
    ours = build_report(Options(roots=(str(config),)))[sid].cost_usd
    cc = _results(name)[-1]["total_cost_usd"]
    assert cc < ours - 0.01  # the resumed process's own calls only
    line = _line(_cli_json(sid, path, cc), config)
    assert f"session ${ours:.2f}" in line and f"(Claude Code ${cc:.2f})" in line, line

    name = "2.1.330-s10_compact"
    config = load_fixture(name).config_dir
    (sid, path), = _sessions(config)
    ours = build_report(Options(roots=(str(config),)))[sid].cost_usd
    cc = _results(name)[-1]["total_cost_usd"]
    assert cc > ours + 0.01  # the compaction's summary call: billed, not in the transcript's usage
    assert f"(Claude Code ${cc:.2f})" in _line(_cli_json(sid, path, cc), config)


def test_today_the_active_block_and_what_ccotel_run_recorded(tmp_path):
    """From a ledger the pipeline wrote: today's cost, the active block with its time left, and a
    killed turn of the session (s06: the first process was killed)."""
    name = "2.1.330-s06_kill_orphan_resume"
    config = load_fixture(name).config_dir
    state = tmp_path / "state"
    state.mkdir()
    ledger = Ledger(str(state / LEDGER_FILE), roots=(str(config),))
    Pipeline(Options(roots=(str(config),)), emit=ledger.record, state=None).backfill(close_all=True)
    calls = list(ledger.calls())
    turns = list(ledger.turns())
    ledger.close()
    assert any(t.outcome == "killed" for t in turns)
    (sid, path), = _sessions(config)
    last = max(c.time_ns for c in calls)
    now = last + 10 * MIN
    line = _line(_cli_json(sid, path), config, str(state), now)
    total = sum(c.cost or 0 for c in calls if not c.api_error)
    assert f"today ${total:.2f}" in line or "today" not in line  # a day's edge: checked below at noon
    first = min(c.time_ns for c in calls)
    start = first - first % (3600 * 10**9)
    left = (start + 5 * 3600 * 10**9 - now) // MIN
    assert f"block ${total:.2f}" in line and f"{left // 60}h{left % 60:02d}m left" in line, line
    assert "turn killed" in line, line
    assert "today $" in _line(_cli_json(sid, path), config, str(state), now)
    # six hours on: no active block, nothing recorded in the last hour
    later = _line(_cli_json(sid, path), config, str(state), last + 6 * 3600 * 10**9)
    assert "block" not in later and "killed" not in later, later


def test_a_tool_call_waiting_past_the_stall_timeout(tmp_path):
    root = tmp_path / "claude"
    proj = root / "projects" / "p"
    proj.mkdir(parents=True)
    lines = [{"type": "assistant", "uuid": "u1", "sessionId": "s", "requestId": "r1",
              "timestamp": "2026-03-01T10:00:00.000Z",
              "message": {"id": "m1", "model": "claude-opus-5-5", "usage": {"input_tokens": 5, "output_tokens": 7},
                          "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]}}]
    (proj / "s.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    at = 1772359200 * 10**9  # 2026-03-01T10:00:00Z
    assert "Bash waiting" not in _line(_cli_json("s", proj / "s.jsonl"), root, now_ns=at + 2 * MIN)
    assert "! Bash waiting 5m" in _line(_cli_json("s", proj / "s.jsonl"), root, now_ns=at + 5 * MIN)
    with (proj / "s.jsonl").open("a") as f:
        f.write(json.dumps({"type": "user", "uuid": "u2", "timestamp": "2026-03-01T10:06:00.000Z",
                            "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}}) + "\n")
    assert "waiting" not in _line(_cli_json("s", proj / "s.jsonl"), root, now_ns=at + 7 * MIN)


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"session_id": 5, "model": "x", "cost": []}',
                                   '{"session_id": "s", "transcript_path": "/nonexistent/x.jsonl"}'])
def test_it_never_fails_and_prints_one_line(stdin, tmp_path):
    """Through ``python -m ccotel statusline``, as Claude Code runs it: bad or odd input, no state,
    no ledger, a broken ledger, a transcript that is not there: one line, exit 0."""
    state = tmp_path / "state"
    state.mkdir()
    (state / PEEK_LEDGER_FILE).write_bytes(b"not a database")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "CLAUDE_CONFIG_DIR": str(tmp_path)}
    for args in (["--state", str(state)], ["--state", "none"], ["--state", str(tmp_path / "nowhere" / "x")]):
        proc = subprocess.run([sys.executable, "-m", "ccotel", "statusline", *args], input=stdin, text=True,
                              capture_output=True, env=env, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert len(proc.stdout.splitlines()) == 1 and proc.stdout.strip(), proc.stdout
        assert "ccotel:" not in proc.stdout, proc.stdout  # no error swallowed on the way
    assert "transcript outside the roots" in proc.stdout or "transcript" not in stdin


def test_no_color_and_the_roots(tmp_path):
    config = load_fixture("2.1.330-s01_bash_tool").config_dir
    (sid, path), = _sessions(config)
    assert "\x1b[" in _line(_cli_json(sid, path), config, color=True)
    assert "\x1b[" not in _line(_cli_json(sid, path), config, color=False)
    out = io.StringIO()
    os.environ["NO_COLOR"] = "1"
    try:
        import contextlib

        with contextlib.redirect_stdout(out):
            assert main(["--root", str(config), "--state", "none"], io.StringIO(json.dumps(_cli_json(sid, path)))) == 0
    finally:
        del os.environ["NO_COLOR"]
    assert "\x1b[" not in out.getvalue() and "session $" in out.getvalue()
    # a transcript outside the roots is not read (nor cached)
    other = tmp_path / "other"
    line = _line(_cli_json(sid, path), other, str(tmp_path / "state"))
    assert "session -" in line and "outside the roots" in line
    assert not (tmp_path / "state" / "statusline").exists()


def test_python_m_ccotel_statusline_loads_no_exporter_pipeline_or_parser(tmp_path):
    config = load_fixture("2.1.330-s01_bash_tool").config_dir
    (sid, path), = _sessions(config)
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    args = [sys.executable, "-X", "importtime", "-m", "ccotel", "statusline", "--root", str(config), "--state",
            str(tmp_path / "state")]
    doc = json.dumps(_cli_json(sid, path))
    for _run in range(2):  # the first run prices the calls (the pricing module); the second reads its cache
        proc = subprocess.run(args, input=doc, text=True, capture_output=True, env=env, timeout=60, check=True)
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "session $" in proc.stdout
    for heavy in ("ccotel.cli", "argparse", "logging", "ccotel.export", "ccotel.run", "ccotel.assemble", "ccotel.spans",
                  "ccotel.spans.pricing", "opentelemetry", "msgspec", "rich", "orjson", "dataclasses", "genai_prices",
                  "typing", "calendar", "datetime", "sqlite3"):  # no ledger in this state: no sqlite3
        assert heavy not in loaded, heavy


def test_the_sessions_figures_equal_the_reports_on_realdata(tmp_path, realdata_config_dir):  # noqa: F811
    """Every real session (Claude Code 1.0.17 to 2.1.2xx: growing output snapshots, subagent
    files, glued lines), but the advisor session (its iterations are priced apart by the report)
    and the 2.0.x sessions whose agents are flat files beside them (not read by the status line)."""
    config = realdata_config_dir
    report = build_report(Options(roots=(str(config),)))
    flat = {e.session_id for e in realdata_layout() if e.agent and "/subagents/" not in e.dest}
    compared = 0
    for sid, path in _sessions(config):
        want = report.get(sid)
        if want is None or sid in flat or sid == ADVISOR_SESSION:
            continue
        got = read_session(str(path), sid, None)
        assert sum(c[1] + c[2] + c[3] + c[4] for c in got.calls.values()) == want.total_tokens, sid
        assert sum(c[9] or 0.0 for c in got.calls.values()) == pytest.approx(want.cost_usd, abs=1e-6), sid
        compared += 1
    assert compared > 40


def test_the_peek_names_the_ledgers_file():
    assert PEEK_LEDGER_FILE == LEDGER_FILE


def test_its_timestamps_equal_the_parsers(realdata_config_dir):  # noqa: F811
    """stamp_ns (no calendar, no datetime) against read.parse_time on every timestamp of
    shared/realdata, and on shapes it hands over to the parser."""
    from ccotel.commands.statusline.session import stamp_ns
    from ccotel.read.parse_time import parse_timestamp

    seen = 0
    for path in sorted((realdata_config_dir / "projects").rglob("*.jsonl")):
        for stamp in re.findall(r'"timestamp":"([^"]+)"', path.read_text(encoding="utf-8", errors="replace")):
            assert stamp_ns(stamp) == (parse_timestamp(stamp) or 0), stamp
            seen += 1
    assert seen > 10_000
    for odd in ("2026-01-10T21:35:24Z", "2026-01-10T21:35:24.654321Z", "2026-01-10T21:35:24.654+02:00", "", None, 5,
                "2024-02-29T23:59:59.999Z", "1969-12-31T23:59:59.000Z", "2026-13-01T00:00:00.000Z"):
        assert stamp_ns(odd) == (parse_timestamp(odd) or 0), odd
