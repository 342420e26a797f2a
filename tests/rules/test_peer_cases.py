"""The dedup rules other transcript readers test (ccusage's data-loader tests, ccstats, tokscale,
splitrail, goccc), each on minimal lines written here, held through every reader of ccotel: the
traces (chat spans), the report read from the transcripts, and the ledger a backfill wrote.

The rule (DESIGN.md, rules/transcript.py): one call per message.id + requestId (message.id alone
without a requestId), usage once, the final (largest) snapshot whichever file or line order holds
it; a line with usage and no message.id is a call of its own (nothing to dedup it by).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ccotel.commands.report.transcripts import build_report
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger

SID = "bebebebe-1111-4222-8333-444444444444"
U = {"input_tokens": 3, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}


def line(uuid: str | None, parent: str | None, mid: str | None, out: int, *, rid: str | None = "req_1",
         stop: str | None = "end_turn", model: str | None = "claude-opus-4-6", version: str = "2.1.39",
         usage: dict[str, Any] | None = None, drop: tuple[str, ...] = (), ts: str = "2026-01-01T00:00:01.000Z",
         **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "model": model,
                           "content": [{"type": "text", "text": "x"}], "stop_reason": stop,
                           "usage": {**U, "output_tokens": out, **(usage or {})}}
    if mid is None:
        del msg["id"]
    if model is None:
        del msg["model"]
    d: dict[str, Any] = {"parentUuid": parent, "isSidechain": False, "type": "assistant", "uuid": uuid,
                         "sessionId": SID, "version": version, "timestamp": ts, "cwd": "/p", "message": msg,
                         "requestId": rid, **extra}
    if rid is None:
        del d["requestId"]
    if uuid is None:
        del d["uuid"]
    for k in drop:
        d.pop(k, None)
    return d


def prompt(uuid: str, parent: str | None = None, ts: str = "2026-01-01T00:00:00.000Z") -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "type": "user", "uuid": uuid, "sessionId": SID,
            "version": "2.1.39", "timestamp": ts, "cwd": "/p", "message": {"role": "user", "content": "go"}}


def write(root: Path, rel: str, lines: list[dict[str, Any]]) -> None:
    path = root / "projects" / "-p" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))


def readings(root: Path, tmp: Path) -> dict[str, dict[str, list[int]]]:
    """model -> [calls, input, output, cache_read, cache_creation] as the spans, the report and the
    ledger each say."""
    spans: list[SpanRecord] = []
    ledger = Ledger(str(tmp / "ledger.db"))
    p = Pipeline(Options(roots=(str(root),)), emit=spans.extend, ledger=ledger)
    p.backfill(close_all=True)
    p.process_acks()
    from_spans: dict[str, list[int]] = {}
    for s in spans:
        a = s.attributes
        if a.get("gen_ai.operation.name") != "chat":
            continue
        row = from_spans.setdefault(str(a.get("gen_ai.response.model", "unknown")), [0] * 5)
        row[0] += 1
        row[1] += int(a.get("claude_code.usage.input_tokens", 0))
        row[2] += int(a.get("gen_ai.usage.output_tokens", 0))
        row[3] += int(a.get("gen_ai.usage.cache_read.input_tokens", 0))
        row[4] += int(a.get("gen_ai.usage.cache_write.input_tokens", 0))
    from_report: dict[str, list[int]] = {}
    for u in build_report(Options(roots=(str(root),))).values():
        for model, r in u.by_model.items():
            got = from_report.setdefault(model, [0] * 5)
            for i, v in enumerate((r[4], r[0], r[1], r[3], r[2])):
                got[i] += int(v)
    from_ledger: dict[str, list[int]] = {}
    for c in ledger.calls():
        row = from_ledger.setdefault(c.model or "unknown", [0] * 5)
        for i, v in enumerate((1, *c.usage[:4])):
            row[i] += v
    ledger.close()
    return {"spans": from_spans, "report": from_report, "ledger": from_ledger}


def assert_everywhere(root: Path, tmp: Path, want: dict[str, list[int]]) -> None:
    got = readings(root, tmp)
    assert got == {"spans": want, "report": want, "ledger": want}


OPUS = "claude-opus-4-6"


def test_one_call_per_key_keeps_the_largest_output_written_out_of_order(tmp_path):
    """ccusage 'keeps the entry with more tokens' (data-loader dedupe tests): the larger snapshot
    is written first, a smaller one after it (a copy re-written late): 40 output, one call."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "msg_1", 40, stop="tool_use"),
                                 line("a2", "a1", "msg_1", 7, stop=None)])
    assert_everywhere(root, tmp_path, {OPUS: [1, 3, 40, 1000, 100]})


def test_a_copy_with_a_larger_cache_field_wins_at_equal_output(tmp_path):
    """Same key, same output, one copy with more cache_read: the larger total is the later snapshot."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "msg_1", 40),
                                 line("a2", "a1", "msg_1", 40, usage={"cache_read_input_tokens": 1500})])
    assert_everywhere(root, tmp_path, {OPUS: [1, 3, 40, 1500, 100]})


def test_dedup_by_message_id_where_there_is_no_request_id(tmp_path):
    """A backend that writes no requestId (glm, qwen): message.id alone is the call, even when
    another response's line comes between two of its lines."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "m_1", 5, rid=None, stop=None),
                                 line("b1", "a1", "m_2", 9, rid=None),
                                 line("a2", "b1", "m_1", 30, rid=None)])
    assert_everywhere(root, tmp_path, {OPUS: [2, 6, 39, 2000, 200]})


def test_no_dedup_for_lines_without_a_message_id(tmp_path):
    """ccusage never dedups an entry without message.id: each such line is a call of its own."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", None, 5), line("a2", "a1", None, 5)])
    assert_everywhere(root, tmp_path, {OPUS: [2, 6, 10, 2000, 200]})


def test_a_side_question_replaying_the_parents_message_under_a_new_request_id_is_not_a_new_call(tmp_path):
    """ccusage #913: /btw logs its side question as subagents/agent-aside_question-*.jsonl, whose
    lines replay the parent's message.id under a new requestId: the same API call."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "msg_1", 40, rid="req_1")])
    side = line("s1", None, "msg_1", 40, rid="req_btw", isSidechain=True, agentId="aside_question-7f3a")
    write(root, f"{SID}/subagents/agent-aside_question-7f3a.jsonl", [side])
    assert_everywhere(root, tmp_path, {OPUS: [1, 3, 40, 1000, 100]})


def test_advisor_iterations_are_counted_once_when_the_parent_line_is_written_twice(tmp_path):
    """2.1.2xx+: usage.iterations' advisor_message entries are calls of their own model; the
    response's lines all repeat them: once per call, not per line."""
    root = tmp_path / "c"
    adv = {"iterations": [{"type": "message", "input_tokens": 3, "output_tokens": 20},
                          {"type": "advisor_message", "model": "claude-fable-5", "input_tokens": 50,
                           "output_tokens": 8, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}]}
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "msg_1", 20, usage=adv, version="2.1.330"),
                                 line("a2", "a1", "msg_1", 20, usage=adv, version="2.1.330")])
    assert_everywhere(root, tmp_path, {OPUS: [1, 3, 20, 1000, 100], "claude-fable-5": [1, 50, 8, 0, 0]})


def test_a_line_with_usage_and_no_model_is_counted_and_unpriced(tmp_path):
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [prompt("p1"), line("a1", "p1", "msg_1", 40, model=None)])
    assert_everywhere(root, tmp_path, {"unknown": [1, 3, 40, 1000, 100]})
    report = build_report(Options(roots=(str(root),)))[SID]
    assert report.api_calls == 1 and report.cost_usd == 0 and report.unpriced_models


def test_the_final_snapshot_in_a_compaction_copy_read_after_the_main_file_on_2_1_87(tmp_path):
    """Claude Code 2.1.87: a compaction agent's file copies the main conversation's earlier lines;
    the copy holds a call's final usage (6234, tool_use) where the main file holds its early
    snapshot (59, stop_reason null), and the main file goes on past it. The final one counts."""
    root = tmp_path / "c"
    v = "2.1.87"
    early = line("a1", "p1", "msg_1", 59, stop=None, version=v)
    write(root, f"{SID}.jsonl", [prompt("p1"), early, line("b1", "a1", "msg_2", 12, rid="req_2", version=v)])
    final = line("a1", "p1", "msg_1", 6234, stop="tool_use", version=v, isSidechain=True,
                 agentId="acompact-1a2b3c")
    write(root, f"{SID}/subagents/agent-acompact-1a2b3c.jsonl", [{**prompt("p1"), "isSidechain": True}, final])
    assert_everywhere(root, tmp_path, {OPUS: [2, 6, 6234 + 12, 2000, 200]})


def test_a_line_without_its_envelope_is_still_a_call(tmp_path):
    """What other tools write in Claude Code's format: an assistant line with message.id and usage
    but no uuid, parentUuid or sessionId, or no type. Each counts its call; a line with nothing
    to count is still skipped."""
    root = tmp_path / "c"
    write(root, f"{SID}.jsonl", [
        prompt("p1"),
        line(None, None, "msg_1", 10, drop=("parentUuid", "sessionId")),
        line("x2", "p1", "msg_2", 20, rid="req_2", drop=("type",)),
        {"uuid": "x3", "message": {"role": "assistant", "content": "no usage, no id"}},
    ])
    assert_everywhere(root, tmp_path, {OPUS: [2, 6, 30, 2000, 200]})


def test_an_envelope_less_call_is_placed_under_its_session_s_turn_else_a_root_and_counted_live(tmp_path):
    """Under the turn its session's lines lead to when one is open; a trace of its own otherwise. Each
    such line is counted by the first envelope field it lacks; the line with nothing to count is a
    bad_field as before."""
    from ccotel.metrics.counters import Metrics

    root = tmp_path / "c"
    (root / "projects").mkdir(parents=True)
    clock = [1_767_225_700 * 10**9]
    spans: list[SpanRecord] = []
    m = Metrics()
    p = Pipeline(Options(roots=(str(root),)), emit=spans.extend, metrics=m, clock=lambda: clock[0])
    p.backfill()
    write(root, f"{SID}.jsonl", [
        prompt("p1", ts="2026-01-01T00:01:40.000Z"),
        line(None, None, "msg_1", 10, drop=("parentUuid", "sessionId"), ts="2026-01-01T00:01:41.000Z"),
        {"uuid": "x3", "message": {"role": "assistant", "content": "no usage, no id"}},
    ])
    other = "cfcfcfcf-1111-4222-8333-444444444444"
    write(root, f"{other}.jsonl", [line("y1", None, "msg_2", 20, rid="req_2", drop=("type", "sessionId"),
                                        ts="2026-01-01T00:01:41.000Z")])
    p.poll([str(root / "projects" / "-p" / f"{SID}.jsonl"), str(root / "projects" / "-p" / f"{other}.jsonl")])
    clock[0] += 120 * 10**9
    p.tick()
    chats = {s.attributes["gen_ai.response.id"]: s for s in spans if s.name.startswith("chat")}
    turns = {s.attributes["gen_ai.conversation.id"]: s for s in spans if s.parent_span_id is None}
    assert chats["msg_1"].trace_id == turns[SID].trace_id  # under the prompt's turn
    assert chats["msg_1"].parent_span_id == turns[SID].span_id
    assert chats["msg_2"].trace_id == turns[other].trace_id  # a turn of its own (a continuation)
    assert m.value("ccotel_calls_without_envelope", "uuid") == 1
    assert m.value("ccotel_calls_without_envelope", "type") == 1
    assert m.value("ccotel_parse_errors", "bad_field") == 1
