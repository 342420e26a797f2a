"""The usage ledger: fed the spans the real pipeline builds, it holds every API call once, keeps
history after the transcripts are gone, and sums to what the transcripts say."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from ccotel.commands.report.from_ledger import open_ledger
from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Data, Query, Report
from ccotel.commands.report.summary import summarize
from ccotel.commands.report.transcripts import build_report, gather
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import LEDGER_FILE, SCHEMA_VERSION, WRITER_CACHE_KIB, Ledger, LedgerError
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.harness.install import OLDEST
from tests.transcript import Transcript, text, tool_use

UTC = Query(view="session").tz  # None: figures below do not depend on the zone


def pipeline_spans(root: Path) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(str(root),)), emit=out.extend, state=None).backfill(close_all=True)
    return out


def build_ledger(root: Path, path: Path) -> Ledger:
    """A ledger written as the pipeline reads ``root`` (the hook the pipeline will call)."""
    ledger = Ledger(str(path), roots=(str(root),))
    Pipeline(Options(roots=(str(root),)), emit=ledger.record, state=None).backfill(close_all=True)
    return ledger


def figures(report: Report) -> dict[str, tuple[object, ...]]:
    """Per row: tokens by type, cost, API calls, and tokens per model."""
    return {r.key: (r.input, r.output, r.cache_write, r.cache_read, r.cache_write_5m, r.cache_write_1h,
                    round(r.cost, 6), r.api_calls, r.api_errors, sorted(r.models), sorted(r.unpriced),
                    {m: (t.input, t.output, t.cache_write, t.cache_read, t.calls) for m, t in r.by_model.items()})
            for r in report.rows}


def from_transcripts(root: Path, view: str = "session") -> Report:
    return summarize(gather(Options(roots=(str(root),)), None, workers=1), Query(view=view))


def from_ledger(root: Path, ledger: Ledger, view: str = "session", grace_ns: int = -(10**18)) -> Report:
    """The report answered from the ledger alone (a negative grace: no file is newer than it)."""
    return summarize(gather(Options(roots=(str(root),)), ledger, workers=1, grace_ns=grace_ns), Query(view=view))


@pytest.mark.parametrize("name", list_fixtures())
def test_ledger_from_the_pipeline_equals_the_transcript_report(tmp_path, name):
    """Both CLI versions, every scenario: per session and per day, tokens by type, cost, calls and
    models from the ledger equal what the fast transcript reader finds; and the per-session
    figures equal the existing report (build_report)."""
    root = load_fixture(name).config_dir
    ledger = build_ledger(root, tmp_path / LEDGER_FILE)
    for view in ("session", "daily", "project"):
        ours = from_ledger(root, ledger, view)
        assert ours.source == "ledger"
        assert figures(ours) == figures(from_transcripts(root, view)), view
    old = build_report(Options(roots=(str(root),)), workers=1)
    assert {sid: (u.input_tokens, u.output_tokens, u.api_calls, round(u.cost_usd, 6)) for sid, u in old.items()} == \
        {r.key: (r.input, r.output, r.api_calls, round(r.cost, 6)) for r in from_ledger(root, ledger).rows
         if r.api_calls}


def test_recording_twice_counts_once(tmp_path):
    """The same spans recorded twice, and a second backfill over the same files: the same rows."""
    root = load_fixture("2.1.330-s03_parallel_subagents").config_dir
    spans = pipeline_spans(root)
    ledger = Ledger(str(tmp_path / LEDGER_FILE), roots=(str(root),))
    ledger.record(spans)
    once = (figures(from_ledger(root, ledger)), _counts(ledger))
    ledger.record(spans)
    Pipeline(Options(roots=(str(root),)), emit=ledger.record, state=None).backfill(close_all=True)
    assert (figures(from_ledger(root, ledger)), _counts(ledger)) == once
    assert once[1]["calls"] == len([s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"])


def test_a_writer_keeps_a_larger_page_cache_and_a_reader_the_default(tmp_path):
    """The writer's inserts land on random leaves of the call key's index: its page cache is
    WRITER_CACHE_KIB from its first write on; a report's open (reads only) keeps SQLite's default."""
    root = load_fixture("2.1.330-s03_parallel_subagents").config_dir
    path = tmp_path / LEDGER_FILE
    writer = Ledger(str(path), roots=(str(root),))
    default = writer.db.execute("PRAGMA cache_size").fetchone()[0]
    writer.record(pipeline_spans(root))
    assert writer.db.execute("PRAGMA cache_size").fetchone()[0] == -WRITER_CACHE_KIB != default
    reader = Ledger(str(path))
    assert sum(1 for _ in reader.calls()) == _counts(writer)["calls"] > 0
    assert reader.db.execute("PRAGMA cache_size").fetchone()[0] == default
    reader.close()
    writer.close()


def _counts(ledger: Ledger) -> dict[str, int]:
    return {t: ledger.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("calls", "tools", "agents",
                                                                                       "turns")}


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_history_stays_after_claude_code_deletes_the_transcripts(tmp_path, name):
    """Build the ledger, delete every transcript (Claude Code's 30-day cleanup): every view still
    shows the same rows, tool calls, subagents and health; the transcripts alone now show nothing."""
    root = tmp_path / "claude"
    shutil.copytree(load_fixture(name).config_dir, root)
    ledger = build_ledger(root, tmp_path / "state" / LEDGER_FILE)
    ledger.close()
    before = {v: _json_rows(root, tmp_path / "state", v) for v in ("daily", "weekly", "monthly", "session", "project")}
    assert before["session"]["totals"]["apiCalls"] > 0 and before["session"]["totals"]["toolCalls"] > 0
    shutil.rmtree(root / "projects")
    (root / "projects").mkdir()
    after = {v: _json_rows(root, tmp_path / "state", v) for v in before}
    assert after == before
    gone = as_json(from_transcripts(root))
    assert gone["sessions"] == [] and gone["totals"]["apiCalls"] == 0


def _json_rows(root: Path, state_dir: Path, view: str) -> dict[str, object]:
    ledger = open_ledger(str(state_dir), (str(root),))
    assert ledger is not None
    try:
        doc = as_json(summarize(gather(Options(roots=(str(root),)), ledger, workers=1), Query(view=view)))
    finally:
        ledger.close()
    doc.pop("source")
    return doc


def test_a_call_in_the_ledger_and_in_a_newer_transcript_counts_once(tmp_path):
    """Files written since the ledger (within its grace) are read again; their calls the ledger
    holds are not added twice, a call appended since is added once."""
    root = tmp_path / "claude"
    sid = "aaaaaaaa-1111-4222-8333-444444444444"
    t = Transcript(sid, version="2.1.330")
    t.prompt("one", parent=None)
    t.response("msg_1", [text("a")], stop_reason="end_turn")
    path = root / "projects" / "-p" / f"{sid}.jsonl"
    t.write(str(path))
    ledger = build_ledger(root, tmp_path / LEDGER_FILE)
    both = summarize(gather(Options(roots=(str(root),)), ledger, workers=1, grace_ns=10**18), Query())
    assert both.source == "ledger+transcripts"
    assert figures(both) == figures(from_ledger(root, ledger)) == figures(from_transcripts(root))
    t.prompt("two")
    t.response("msg_2", [text("b")], stop_reason="end_turn")
    t.write(str(path))  # appended after the ledger was written: newer than it
    newer = summarize(gather(Options(roots=(str(root),)), ledger, workers=1), Query())
    assert newer.source == "ledger+transcripts"
    assert newer.rows[0].api_calls == 2
    assert figures(newer) == figures(from_transcripts(root))


def test_the_later_snapshot_of_a_call_wins_in_either_order(tmp_path):
    root = load_fixture("2.1.330-s01_bash_tool").config_dir
    chat = next(s for s in pipeline_spans(root) if s.attributes.get("gen_ai.operation.name") == "chat")
    early = SpanRecord(**{**chat.__dict__, "attributes": {**chat.attributes, "gen_ai.usage.output_tokens": 1}})
    for order in ((early, chat), (chat, early)):
        ledger = Ledger(":memory:")
        for span in order:
            ledger.record([span])
        rows = list(ledger.calls())
        assert len(rows) == 1 and rows[0].usage[1] == chat.attributes["gen_ai.usage.output_tokens"]


def test_health_tools_and_subagents_from_the_fixtures(tmp_path):
    """Counted against the transcript files themselves: tool_use blocks, error results, subagent
    files; the kill-and-resume scenario has its orphan (2.1.197: a dead branch, a reset; 2.1.330 and
    later: repaired on resume, a kill)."""
    for name in list_fixtures():
        root = load_fixture(name).config_dir
        ledger = build_ledger(root, tmp_path / f"{name}.db")
        total = from_ledger(root, ledger).totals
        uses, errors = _tool_uses(root)
        assert (total.tool_calls, total.tool_errors) == (len(uses), len(errors | _orphans(uses, root))), name
        agents = len(list((root / "projects").rglob("agent-*.meta.json")))
        assert total.subagents == agents, name
        if "s06_kill_orphan_resume" in name:
            assert total.orphans == 1, name
            repaired = load_fixture(name).version != OLDEST
            assert (total.kills, total.resets) == ((1, 0) if repaired else (0, 1)), name
        else:
            assert total.ghosts == 0, name


def _tool_uses(root: Path) -> tuple[set[str], set[str]]:
    uses: set[str] = set()
    errors: set[str] = set()
    for path in (root / "projects").rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            o = orjson.loads(line)
            content = (o.get("message") or {}).get("content") if isinstance(o.get("message"), dict) else None
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use" and o.get("message", {}).get("model") != "<synthetic>":
                    uses.add(block["id"])
                elif block.get("type") == "tool_result" and block.get("is_error"):
                    errors.add(block["tool_use_id"])
    return uses, errors


def _orphans(uses: set[str], root: Path) -> set[str]:
    """tool_use ids with no tool_result anywhere (the process died during the call)."""
    results = set()
    for path in (root / "projects").rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            o = orjson.loads(line)
            content = (o.get("message") or {}).get("content") if isinstance(o.get("message"), dict) else None
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    results.add(block["tool_use_id"])
    return uses - results


def test_a_ghost_session_is_a_reset(tmp_path):
    """Prompts and no assistant record at all: one ghost session, one reset (missing transcript)."""
    root = tmp_path / "claude"
    ghost = Transcript("bbbbbbbb-1111-4222-8333-444444444444", version="2.1.330")
    ghost.prompt("hello?", parent=None)
    ghost.write(str(root / "projects" / "-p" / "bbbbbbbb-1111-4222-8333-444444444444.jsonl"))
    fine = Transcript("cccccccc-1111-4222-8333-444444444444", version="2.1.330")
    fine.prompt("go", parent=None)
    fine.response("msg_f", [tool_use("toolu_1", command="ls")], stop_reason="tool_use")
    fine.tool_result("toolu_1", "ok")
    fine.response("msg_g", [text("done")], stop_reason="end_turn")
    fine.write(str(root / "projects" / "-p" / "cccccccc-1111-4222-8333-444444444444.jsonl"))
    ledger = build_ledger(root, tmp_path / LEDGER_FILE)
    rows = {r.key: r for r in from_ledger(root, ledger).rows}
    assert rows["bbbbbbbb-1111-4222-8333-444444444444"].health() == \
        {"orphans": 0, "kills": 0, "ghostSessions": 1, "resets": 1}
    assert rows["cccccccc-1111-4222-8333-444444444444"].health() == \
        {"orphans": 0, "kills": 0, "ghostSessions": 0, "resets": 0}
    assert rows["cccccccc-1111-4222-8333-444444444444"].tool_calls == 1


def test_schema_is_versioned_and_roots_are_checked(tmp_path):
    root = load_fixture("s01_bash_tool").config_dir
    path = tmp_path / LEDGER_FILE
    build_ledger(root, path).close()
    assert open_ledger(str(tmp_path), (str(root),)) is not None
    assert open_ledger(str(tmp_path), (str(tmp_path / "other"),)) is None  # written for other roots
    assert open_ledger("none", (str(root),)) is None
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="schema 999"):
        Ledger(str(path))
    assert open_ledger(str(tmp_path), (str(root),)) is None  # not used, said in the log


def test_data_without_ledger_has_no_tool_rows(tmp_path):
    """From transcripts alone the report says where its tool and health columns come from."""
    root = load_fixture("s01_bash_tool").config_dir
    data = gather(Options(roots=(str(root),)), None, workers=1)
    assert isinstance(data, Data) and data.source == "transcripts" and data.tools == [] and data.calls
