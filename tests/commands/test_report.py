"""ccotel report: the usage-only read equals the spans ccotel exports, in one process or several."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.commands.report.transcripts import build_report
from ccotel.commands.report.usage import SessionUsage, session_usage
from ccotel.read.tail import lines_with as _lines_with
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.fixtures import realdata_config_dir  # noqa: F401


def from_spans(root: str) -> dict[str, SessionUsage]:
    """The reference: the whole pipeline, chat spans summed."""
    totals: dict[str, SessionUsage] = {}
    Pipeline(Options(roots=(root,)), emit=lambda spans: session_usage(spans, totals)).backfill(close_all=True)
    return totals


def figures(report: dict[str, SessionUsage]) -> dict[str, tuple[object, ...]]:
    return {sid: (u.input_tokens, u.output_tokens, u.cache_creation_tokens, u.cache_read_tokens, u.api_calls,
                  round(u.cost_usd, 6), sorted(u.models), u.last_ns) for sid, u in report.items()}


@pytest.mark.parametrize("name", list_fixtures())
def test_fixture_report_equals_spans(name):
    root = str(load_fixture(name).config_dir)
    assert figures(build_report(Options(roots=(root,)), workers=1)) == figures(from_spans(root))


def test_realdata_report_equals_spans_in_one_and_three_processes(realdata_config_dir):  # noqa: F811
    root = str(realdata_config_dir)
    ref = figures(from_spans(root))
    assert len(ref) >= 50
    assert figures(build_report(Options(roots=(root,)), workers=1)) == ref
    assert figures(build_report(Options(roots=(root,)), workers=3, parallel_min_bytes=0)) == ref


def test_the_quick_line_read_equals_the_parser_on_every_real_assistant_line(realdata_config_dir):  # noqa: F811
    """The report's decoder (a small struct, usage counts taken as written when there are no
    advisor iterations or thinking details) gives what the full parser gives, line by line."""
    from ccotel.commands.report.transcripts import _NEEDLE, _quick, _slow

    checked = iterations = 0
    for path in sorted(Path(realdata_config_dir).rglob("*.jsonl")):
        for offset, raw in _lines_with(str(path), _NEEDLE, 64 << 20):
            one = _quick(raw)
            if one:
                assert [one] == _slow(raw, offset), (path, offset)
                checked += 1
                iterations += b'"iterations"' in raw
    assert checked > 10_000 and iterations > 0


def test_a_file_read_in_one_loop_equals_its_lines_taken_one_by_one(realdata_config_dir):  # noqa: F811
    """``read_file`` takes the usual line inline: every call of every session group (key, session,
    usage, error, model, times, project, cwd) is what ``take`` makes of the same lines, on realdata
    and on every fixture (replayed lines, side questions, compaction copies, API errors...)."""
    from dataclasses import astuple

    from ccotel.commands.report.transcripts import _NEEDLE, _GroupCalls, _quick, _slow
    from ccotel.read.discover import find, session_groups

    roots = [str(realdata_config_dir), *(str(load_fixture(name).config_dir) for name in list_fixtures())]
    calls = 0
    for root in roots:
        for group in session_groups(find((root,), None, {})):
            inline, by_line = _GroupCalls(), _GroupCalls()
            for _root, tf in group:
                inline.read_file(tf, 64 << 20)
                by_line.last_mid = None
                for offset, raw in _lines_with(tf.path, _NEEDLE, 64 << 20):
                    one = _quick(raw)
                    for line in (_slow(raw, offset) if one is None else [one] if one else []):
                        by_line.take(line, tf)
            assert list(inline.calls) == list(by_line.calls), root
            assert [astuple(c) for c in inline.calls.values()] == [astuple(c) for c in by_line.calls.values()], root
            calls += len(inline.calls)
    assert calls > 4_000


def test_jobs_over_processes_are_each_read_once(corpus):
    """More jobs than processes, taken as processes come free (shard.run_jobs): each job read
    once, the results in the jobs' order, the calls those of one process reading them all."""
    from ccotel.commands.report.transcripts import _merged, _read_jobs, _read_shard
    from ccotel.read.discover import find, session_groups
    from ccotel.spans.pricing import DEFAULT_PRICING

    groups = session_groups(find((str(corpus),), None, {}))
    jobs = [[(i, g)] for i, g in enumerate(groups)]
    assert len(jobs) >= 8
    results = _read_jobs(jobs, 2, 64 << 20, DEFAULT_PRICING)
    assert len(results) == len(jobs)
    assert [_read_shard(job, 64 << 20, DEFAULT_PRICING) for job in jobs] == results
    assert sorted(row[0] for rows in results for row in rows) == \
        sorted(row[0] for row in _read_shard(list(enumerate(groups)), 64 << 20, DEFAULT_PRICING))
    assert _merged(results, DEFAULT_PRICING) == \
        _merged([_read_shard(list(enumerate(groups)), 64 << 20, DEFAULT_PRICING)], DEFAULT_PRICING)


def _job_waiting_for_the_others(job: tuple[int, str, int], _max_line_bytes: int, _pricing: object) -> bool:
    """Job 0 waits (up to 20 s) until every other job has run; the others leave a mark."""
    import time

    index, marks, total = job
    if index:
        time.sleep(0.2)  # long enough for a pool to queue the next jobs to the busy worker
        Path(marks, str(index)).touch()
        return True
    deadline = time.monotonic() + 20
    while len(os.listdir(marks)) < total - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(os.listdir(marks)) == total - 1


def test_no_process_holds_a_job_another_could_start(tmp_path):
    """While one process is busy with a long job, the others take every other job: none is
    queued to the busy one (a process pool hands each worker its next jobs ahead of time; this
    process then waited for them at the end)."""
    from ccotel.commands.report.transcripts import _read_jobs
    from ccotel.spans.pricing import DEFAULT_PRICING

    jobs = [(i, str(tmp_path), 8) for i in range(8)]
    assert _read_jobs(jobs, 2, 64 << 20, DEFAULT_PRICING, read=_job_waiting_for_the_others) == [True] * 8


def _job_failing_in_a_worker(job: tuple[int, int], _max_line_bytes: int, _pricing: object) -> int:
    import time

    index, parent = job
    time.sleep(0.05)  # long enough for the worker to start and take a job
    if os.getpid() != parent:
        raise ValueError("a worker's job failed")
    return index


def test_a_job_that_fails_in_a_worker_fails_the_read():
    """A worker's error is not lost (nor its job silently missing from the results): the read fails."""
    from ccotel.commands.report.transcripts import _read_jobs
    from ccotel.spans.pricing import DEFAULT_PRICING

    jobs = [(i, os.getpid()) for i in range(16)]
    with pytest.raises(RuntimeError, match="a worker's job failed"):
        _read_jobs(jobs, 2, 64 << 20, DEFAULT_PRICING, read=_job_failing_in_a_worker)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.corpus import generate

    out = tmp_path_factory.mktemp("corpus")
    generate(str(out), 6_000_000, seed=3, session_mean=300_000, projects=5)
    return out


def test_corpus_report_equals_spans_and_generator(corpus):
    import orjson

    root = str(corpus)
    ref = figures(from_spans(root))
    parallel = build_report(Options(roots=(root,)), workers=2, parallel_min_bytes=0)
    assert figures(parallel) == ref
    expected = orjson.loads((corpus / "expected.json").read_bytes())["sessions"]
    assert {sid: (u.input_tokens, u.output_tokens, u.api_calls) for sid, u in parallel.items()} == \
        {sid: (s["input_tokens"], s["output_tokens"], s["api_calls"]) for sid, s in expected.items()}


def test_a_session_copied_into_another_project_is_counted_once(tmp_path):
    """The shard plan keeps sessions with the same first line together, even across projects."""
    src = load_fixture("s02_resume_two_turns").config_dir
    main = next((src / "projects").rglob("*.jsonl"))
    for project in ("-a", "-b"):
        (tmp_path / "projects" / project).mkdir(parents=True)
    (tmp_path / "projects" / "-a" / main.name).write_bytes(main.read_bytes())
    copy = main.read_bytes().replace(main.stem.encode(), b"00000000-0000-4000-8000-000000000000")
    (tmp_path / "projects" / "-b" / "00000000-0000-4000-8000-000000000000.jsonl").write_bytes(copy)
    os.utime(tmp_path / "projects" / "-b" / "00000000-0000-4000-8000-000000000000.jsonl")
    root = str(tmp_path)
    ref = figures(from_spans(root))
    assert len(ref) == 1  # the copy adds no call: the first session keeps them all
    assert figures(build_report(Options(roots=(root,)), workers=2, parallel_min_bytes=0)) == ref


lines = st.lists(st.one_of(st.just(b""), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
                           st.builds(lambda a, b: a.replace(b"\n", b"") + b"NEEDLE" + b.replace(b"\n", b""),
                                     st.binary(max_size=30), st.binary(max_size=30))), max_size=30)


@settings(max_examples=400, deadline=None)
@given(lines=lines, final_newline=st.booleans(), chunk=st.integers(1, 64), limit=st.integers(1, 80))
def test_lines_with_equals_a_plain_split(tmp_path_factory, lines, final_newline, chunk, limit):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path_factory.mktemp("lw") / "f"
    path.write_bytes(data)
    want, offset = [], 0
    for line in data.split(b"\n"):
        if b"NEEDLE" in line and len(line) <= limit:
            want.append((offset, line))
        offset += len(line) + 1
    assert list(_lines_with(str(path), b"NEEDLE", limit, chunk_size=chunk)) == want


def _user(u, parent, ts, content="hi"):
    return {"type": "user", "uuid": u, "parentUuid": parent, "sessionId": "s1", "timestamp": ts,
            "message": {"role": "user", "content": content}}


def _asst(u, parent, ts, mid, rid, out, stop="end_turn", content=None):
    o = {"type": "assistant", "uuid": u, "parentUuid": parent, "sessionId": "s1", "timestamp": ts,
         "message": {"id": mid, "model": "claude-sonnet-4-20250514", "role": "assistant", "stop_reason": stop,
                     "content": content or [{"type": "text", "text": "x"}],
                     "usage": {"input_tokens": 10, "output_tokens": out, "cache_read_input_tokens": 0,
                               "cache_creation_input_tokens": 0}}}
    if rid is not None:
        o["requestId"] = rid
    return o


def _write(root: Path, lines: list[dict]) -> str:
    import orjson

    d = root / "projects" / "-tmp-p"
    d.mkdir(parents=True)
    (d / "s1.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return str(root)


def test_a_line_that_lost_its_request_id_is_the_same_call(tmp_path):
    """Found in review: the report counted it as a second call; the assembler merges it."""
    root = _write(tmp_path, [_user("p1", None, "2025-06-01T10:00:00.000Z"),
                             _asst("a1", "p1", "2025-06-01T10:00:05.000Z", "msg_1", "req_1", 100, stop=None),
                             _asst("a2", "a1", "2025-06-01T10:00:06.000Z", "msg_1", None, 150)])
    ref = figures(from_spans(root))
    assert ref["s1"][1] == 150 and ref["s1"][4] == 1
    assert figures(build_report(Options(roots=(root,)), workers=1)) == ref


def test_since_keeps_whole_turns_like_the_traces(tmp_path):
    """A turn that started before --since is left out whole, its later calls too (as the spans)."""
    from ccotel.read.parse_time import parse_timestamp

    tool = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "sleep 480"}}]
    result = dict(_user("p2", "a1", "2025-06-01T10:08:00.000Z",
                        [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                  toolUseResult={"stdout": "ok"})
    root = _write(tmp_path, [_user("p1", None, "2025-06-01T10:00:00.000Z"),
                             _asst("a1", "p1", "2025-06-01T10:00:05.000Z", "msg_1", "req_1", 100, "tool_use", tool),
                             result,
                             _asst("a2", "p2", "2025-06-01T10:10:00.000Z", "msg_2", "req_2", 200),
                             _user("p3", "a2", "2025-06-01T10:20:00.000Z"),
                             _asst("a3", "p3", "2025-06-01T10:20:05.000Z", "msg_3", "req_3", 300)])
    options = Options(roots=(root,), since_ns=parse_timestamp("2025-06-01T10:05:00.000Z"))
    got = build_report(options, workers=1)
    assert figures(got) == figures(from_spans_since(options)) and got["s1"].output_tokens == 300


def from_spans_since(options: Options) -> dict[str, SessionUsage]:
    totals: dict[str, SessionUsage] = {}
    Pipeline(options, emit=lambda spans: session_usage(spans, totals)).backfill(close_all=True)
    return totals


# -- the views (daily, weekly, monthly, session, project) ------------------------------------------

import argparse  # noqa: E402
import re  # noqa: E402
from datetime import date  # noqa: E402
from zoneinfo import ZoneInfo  # noqa: E402

import orjson  # noqa: E402

from ccotel.commands.report.command import parse_day  # noqa: E402
from ccotel.commands.report.json_doc import as_json  # noqa: E402
from ccotel.commands.report.rows import Query  # noqa: E402
from ccotel.commands.report.summary import summarize  # noqa: E402
from ccotel.commands.report.transcripts import gather  # noqa: E402
from ccotel.store.ledger import LEDGER_FILE, Ledger  # noqa: E402
from tests.support.report_cli import report_out  # noqa: E402


def _late_call(root: Path) -> str:
    """A session whose one call is at 23:30 UTC on 2025-06-01 (01:30 on 2025-06-02 in Berlin)."""
    return _write(root, [_user("p1", None, "2025-06-01T23:29:50.000Z"),
                         _asst("a1", "p1", "2025-06-01T23:30:00.000Z", "msg_1", "req_1", 100)])


def _ledger_of(root: str, path: Path) -> Ledger:
    ledger = Ledger(str(path), roots=(root,))
    Pipeline(Options(roots=(root,)), emit=ledger.record, state=None).backfill(close_all=True)
    return ledger


@pytest.mark.parametrize("source", ["ledger", "transcripts"])
def test_daily_buckets_respect_the_timezone(tmp_path, source):
    root = _late_call(tmp_path / "claude")
    ledger = _ledger_of(root, tmp_path / LEDGER_FILE) if source == "ledger" else None
    data = gather(Options(roots=(root,)), ledger, workers=1, grace_ns=-(10**18))
    assert data.source == source
    for zone, day, week, month in (("UTC", "2025-06-01", "2025-06-01", "2025-06"),
                                   ("Europe/Berlin", "2025-06-02", "2025-06-01", "2025-06"),
                                   ("America/New_York", "2025-06-01", "2025-06-01", "2025-06")):
        tz = ZoneInfo(zone)
        assert [r.key for r in summarize(data, Query(view="daily", tz=tz)).rows] == [day], zone
        assert [r.key for r in summarize(data, Query(view="weekly", tz=tz)).rows] == [week], zone  # a Sunday
        assert [r.key for r in summarize(data, Query(view="monthly", tz=tz)).rows] == [month], zone
    monday = summarize(data, Query(view="weekly", tz=ZoneInfo("Europe/Berlin"), start_of_week=0))
    assert [r.key for r in monday.rows] == ["2025-06-02"]
    berlin = Query(view="daily", tz=ZoneInfo("Europe/Berlin"), since=date(2025, 6, 2), until=date(2025, 6, 2))
    assert summarize(data, berlin).totals.output == 100
    utc = Query(view="daily", tz=ZoneInfo("UTC"), since=date(2025, 6, 2))
    assert summarize(data, utc).rows == []


def test_since_and_until_take_both_date_forms():
    assert parse_day("20250601") == parse_day("2025-06-01") == date(2025, 6, 1)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_day("June 1st")


def _periods_equal_days(data, tz) -> None:
    days = summarize(data, Query(view="daily", tz=tz))
    for view, cut in (("weekly", None), ("monthly", 7)):
        rows = summarize(data, Query(view=view, tz=tz)).rows
        sums: dict[str, list[float]] = {}
        for d in days.rows:
            key = d.key[:cut] if cut else _week_of(d.key)
            s = sums.setdefault(key, [0] * 9)
            for i, v in enumerate((d.input, d.output, d.cache_write, d.cache_read, d.api_calls, d.tool_calls,
                                   d.tool_errors, d.subagents, d.orphans)):
                s[i] += v
        assert {r.key: [r.input, r.output, r.cache_write, r.cache_read, r.api_calls, r.tool_calls, r.tool_errors,
                         r.subagents, r.orphans] for r in rows} == sums, view
        assert round(sum(r.cost for r in rows), 6) == round(days.totals.cost, 6)


def _week_of(day: str) -> str:
    from datetime import timedelta

    d = date.fromisoformat(day)
    return (d - timedelta(days=(d.weekday() + 1) % 7)).isoformat()  # back to Sunday


def test_weekly_and_monthly_sum_the_days_on_realdata(tmp_path, realdata_config_dir):  # noqa: F811
    root = str(realdata_config_dir)
    ledger = _ledger_of(root, tmp_path / LEDGER_FILE)
    data = gather(Options(roots=(root,)), ledger, workers=1, grace_ns=-(10**18))
    assert data.source == "ledger" and len(data.calls) > 1000
    for zone in ("UTC", "Europe/Berlin", "Pacific/Auckland"):
        _periods_equal_days(data, ZoneInfo(zone))
    # the same on what the transcripts alone say
    _periods_equal_days(gather(Options(roots=(root,)), None, workers=1), ZoneInfo("UTC"))


_run = report_out


def test_run_prints_each_view_as_json_and_as_a_table(tmp_path, monkeypatch):
    """Through add_arguments/run, as cli.py will call them: the default view is session (as the old
    `ccotel report --json`), rows show the project and start time, --breakdown a line per model."""
    monkeypatch.setenv("COLUMNS", "200")  # a pipe: the width COLUMNS says (pytest-xdist workers set their own)
    from tests.harness.fixtures import load_fixture

    root = str(load_fixture("2.1.330-s13_advisor").config_dir)
    state = tmp_path / "state"
    _ledger_of(root, state / LEDGER_FILE).close()
    common = ("--root", root, "--state-dir", str(state), "--timezone", "UTC")
    doc = orjson.loads(_run(*common, "--json"))
    assert doc["source"] in ("ledger", "ledger+transcripts")
    session = doc["sessions"][0]
    assert session["projectPath"].endswith("-proj") and session["cwd"].endswith("/proj")
    assert session["firstActivity"].endswith("Z") and doc["totals"]["apiCalls"] > 0
    assert {m["modelName"] for m in session["modelBreakdowns"]} == set(session["modelsUsed"])
    assert len(session["modelsUsed"]) == 2  # the advisor is a model of its own
    for view, name in (("daily", "daily"), ("weekly", "weekly"), ("monthly", "monthly"), ("project", "projects")):
        rows = orjson.loads(_run(view, *common, "--json"))[name]
        assert sum(r["totalTokens"] for r in rows) == doc["totals"]["totalTokens"], view
    table = _run(*common, "--breakdown")
    assert "/proj" in table and session["firstActivity"][:10] in table and "└" in table
    assert session["sessionId"][:8] in table and "Health" in table
    no_ledger = orjson.loads(_run(*common, "--json", "--no-ledger"))
    assert no_ledger["source"] == "transcripts" and no_ledger["totals"]["totalTokens"] == doc["totals"]["totalTokens"]
    # the transcripts alone give the calls: tools, subagents and health are unknown (null), not 0
    assert doc["totals"]["toolCalls"] > 0 and isinstance(doc["totals"]["health"], dict)
    for figures in (no_ledger["totals"], no_ledger["sessions"][0]):
        assert [figures[k] for k in ("toolCalls", "toolErrors", "subagents", "health")] == [None] * 4
    assert as_json  # the same function the command prints with


def test_since_takes_a_duration_as_the_other_commands_do():
    from datetime import datetime, timedelta

    from ccotel.commands.report.command import parse_day

    assert parse_day("7d") == (datetime.now().astimezone() - timedelta(days=7)).date()
    assert parse_day("2w") == (datetime.now().astimezone() - timedelta(days=14)).date()
    assert str(parse_day("20260105")) == "2026-01-05" == str(parse_day("2026-01-05"))


@pytest.mark.parametrize("columns", [80, 90, 100, 120, 200])
@pytest.mark.parametrize("view", ["daily", "session", "project"])
def test_a_table_never_cuts_a_number_and_keeps_cost(view, columns, tmp_path, monkeypatch, realdata_config_dir):  # noqa: F811
    """At any width every cost in the table is the whole number --json gives (issue 28: 26.55 shown as
    `26` at 100 columns, Cost gone at 80); the columns that do not fit are named under the table."""
    monkeypatch.setenv("COLUMNS", str(columns))
    root = str(realdata_config_dir)
    common = ("--root", root, "--state-dir", str(tmp_path / "none"), "--no-ledger", "--timezone", "UTC")
    doc = orjson.loads(_run(view, *common, "--json"))
    rows = doc[{"daily": "daily", "session": "sessions", "project": "projects"}[view]]
    table = _run(view, *common)
    assert "Cost" in table, table[:2000]
    for want in [f"{r['totalCost']:,.2f}" for r in rows] + [f"{doc['totals']['totalCost']:,.2f}"]:
        assert re.search(rf"(?<![\d.,]){re.escape(want)}\*?(?![\d.,])", table), (want, columns, table[:3000])
    assert max(len(line) for line in table.splitlines()) <= columns
