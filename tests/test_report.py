"""ccotel report: the usage-only read equals the spans ccotel exports, in one process or several."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.pipeline import Options, Pipeline
from ccotel.report import SessionUsage, build_report, session_usage
from ccotel.tail import lines_with as _lines_with
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
    from ccotel.parse import parse_timestamp

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
