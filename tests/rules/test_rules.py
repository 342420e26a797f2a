"""The transcript rules (rules.py), each on the smallest transcript that shows it, through the
stages that use it: the traces (assemble/spans) and the report must agree."""

from __future__ import annotations

from pathlib import Path

from ccotel.commands.report.transcripts import build_report
from ccotel.commands.report.usage import session_usage
from ccotel.records import SpanRecord
from ccotel.rules import transcript as rules
from ccotel.run.pipeline import Options, Pipeline
from tests.transcript import Transcript, text, tool_use

SID = "cdcdcdcd-1111-4222-8333-444444444444"


def spans_of(root: Path) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(str(root),)), emit=out.extend).backfill(close_all=True)
    return out


def test_is_api_call():
    assert rules.is_api_call("claude-opus-5", "model", False)
    assert rules.is_api_call("<synthetic>", "model", True)  # a failed call (2.1.330 writes madeBy model)
    assert not rules.is_api_call("<synthetic>", "other", False)  # the repair's "No response requested."
    assert not rules.is_api_call("<synthetic>", None, False)
    assert not rules.is_api_call("claude-opus-5", "other", False)


def test_writes_final_usage():
    assert rules.writes_final_usage("2.1.330") and rules.writes_final_usage("2.1.231")
    assert not rules.writes_final_usage("2.1.39") and not rules.writes_final_usage(None)
    assert not rules.writes_final_usage("garbage")


def test_call_identity_of_a_line():
    assert rules.line_call_key("msg_1", "req_1", "u1") == "msg_1:req_1"
    assert rules.line_call_key("m_1", None, "u1") == "m_1"  # no requestId: message.id alone
    assert rules.line_call_key(None, "req_1", "u1") == "line:u1"  # no message.id: a call of its own
    assert rules.line_call_key(None, None, None) is None
    assert rules.counts_a_call("msg_1", True) and not rules.counts_a_call("msg_1", False)
    assert not rules.counts_a_call(None, True)
    # a subagent file's line of a message counted under another requestId: the same call (/btw)
    assert rules.replays_parent_message(True, message_seen=True, key_seen=False)
    assert not rules.replays_parent_message(False, message_seen=True, key_seen=False)  # main file
    assert not rules.replays_parent_message(True, message_seen=True, key_seen=True)  # a copy: merged
    assert not rules.replays_parent_message(True, message_seen=False, key_seen=False)


def test_cache_write_split_with_an_advisor():
    iters = [("message", 931, 0, 931), ("advisor_message", 0, 0, 0), ("message", 3176, 3176, 0)]
    assert rules.cache_write_split(0, 931, 4107, iters) == (3176, 931)
    # without advisor iterations the top-level split stands
    assert rules.cache_write_split(10, 20, 30, [("message", 30, 10, 20)]) == (10, 20)
    # iterations that do not add up: the top level is kept
    assert rules.cache_write_split(0, 931, 9999, iters) == (0, 931)


def test_final_snapshot_wins_whichever_file_has_it(tmp_path):
    """DESIGN 1b: one call written into the main file as an early copy (stop_reason null,
    output 6) and into a subagent file with its final usage: counted once, with the final."""
    root = tmp_path / "claude"
    proj = root / "projects" / "-p"
    main = Transcript(SID, version="2.1.330")
    main.prompt("go", parent=None)
    u = {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}
    main.response("msg_x", [text("working")], usage={**u, "output_tokens": 6}, stop_reason=None, request_id="req_x")
    main.response("msg_y", [text("done")], usage={**u, "output_tokens": 40}, stop_reason="end_turn")
    main.write(str(proj / f"{SID}.jsonl"))
    sub = Transcript(SID, agent_id="a1", version="2.1.330", t_ms=main.t_ms)
    sub.prompt("copy", parent=None)
    sub.response("msg_x", [text("working")], usage={**u, "output_tokens": 321}, stop_reason="end_turn",
                 request_id="req_x")
    sub.write(str(proj / SID / "subagents" / "agent-a1.jsonl"))
    spans = spans_of(root)
    chats = {s.attributes["gen_ai.response.id"]: s for s in spans if s.name.startswith("chat")}
    assert len([s for s in spans if s.name.startswith("chat")]) == 2  # one span per call
    assert chats["msg_x"].attributes["gen_ai.usage.output_tokens"] == 321
    assert chats["msg_x"].attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    report = build_report(Options(roots=(str(root),)))[SID]
    assert report.output_tokens == 321 + 40 and report.api_calls == 2
    assert session_usage(spans)[SID].output_tokens == report.output_tokens


def test_non_anthropic_backend_calls_are_counted_and_traced(tmp_path):
    """glm-4.7 / qwen3-coder behind Claude Code: message ids without msg_, no requestId, no cache
    fields. Real calls: one chat span each, counted, unpriced (never a silent $0)."""
    root = tmp_path / "claude"
    t = Transcript(SID, version="2.1.5")
    t.prompt("go", parent=None)
    for i, mid in enumerate(("20260113094230abc", "20260113094231def")):
        t.response(mid, [tool_use(f"call_{i}", command="ls"), text("x")], model="glm-4.7",
                   usage={"input_tokens": 100 + i, "output_tokens": 20}, stop_reason="end_turn")
        for line in t.lines:
            line.pop("requestId", None)
    t.write(str(root / "projects" / "-p" / f"{SID}.jsonl"))
    spans = spans_of(root)
    chats = [s for s in spans if s.name.startswith("chat")]
    assert [s.name for s in chats] == ["chat glm-4.7", "chat glm-4.7"]
    assert all(s.attributes["claude_code.cost.unpriced"] is True for s in chats)
    assert all("claude_code.cost.usd" not in s.attributes for s in chats)
    report = build_report(Options(roots=(str(root),)))[SID]
    assert (report.api_calls, report.input_tokens, report.output_tokens) == (2, 201, 40)
    assert report.unpriced_models == {"glm-4.7"} and report.cost_usd == 0


def test_resume_rules_by_version():
    assert rules.orphan_blocks_resume("2.1.197") and not rules.orphan_blocks_resume("2.1.330")
    assert rules.orphan_blocks_resume(None)  # unknown version: assume no repair
    assert rules.broken_chain_blocks("2.1.143") and not rules.broken_chain_blocks("2.1.197")
    assert rules.first_line_blocks("queue-operation", "2.1.143") is None
    assert rules.first_line_blocks("pr-link", "2.1.143") is True
    assert rules.first_line_blocks("pr-link", "2.1.330") is False


def test_resume_chain_crosses_a_compact_boundary_and_ends_at_a_cycle():
    c = rules.ChainLine
    lines = [c("user", "a", None), c("assistant", "b", "a"), c("system", "cb", None, "b", "compact_boundary"),
             c("user", "s", "cb"), c("assistant", "x", "zz"), c("user", "y", "x")]
    assert rules.resume_chain(lines) == {"y", "x"}
    assert rules.resume_chain(lines[:4]) == {"s", "cb", "b", "a"}
    assert rules.dangling_parents(lines) == [("x", "zz")]
    assert rules.resume_chain([c("user", "p", "q"), c("user", "q", "p")]) == {"p", "q"}


def test_absent_reason():
    day = 86400.0
    kw = {"now_s": 100 * day, "retention": 30}
    assert rules.absent_reason(elsewhere=True, last_seen_s=0, had_transcript=True, **kw) is rules.Absence.RELOCATED
    assert rules.absent_reason(elsewhere=False, last_seen_s=60 * day, had_transcript=True, **kw) is rules.Absence.SWEPT
    assert rules.absent_reason(elsewhere=False, last_seen_s=80 * day, had_transcript=False,
                               **kw) is rules.Absence.NOT_PERSISTED
    missing = rules.absent_reason(elsewhere=False, last_seen_s=80 * day, had_transcript=True, **kw)
    assert missing is rules.Absence.MISSING
    assert rules.retention_days({"cleanupPeriodDays": 7}) == 7 and rules.retention_days({"cleanupPeriodDays": 0}) == 30
