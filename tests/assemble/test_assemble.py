"""Transcripts -> span trees, on synthetic transcripts shaped as docs/format.md describes."""

from __future__ import annotations

import os
from collections import Counter

import orjson
import pytest

from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from tests.transcript import Transcript, text, thinking, tool_use

SID = "11111111-2222-4333-8444-555555555555"


def proj(root: str) -> str:
    return os.path.join(root, "projects", "-tmp-proj")


def run(root: str, close_all: bool = True, **opts) -> tuple[list[SpanRecord], Pipeline]:
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,), **opts), emit=spans.extend)
    p.backfill(close_all=close_all)
    return spans, p


def by_name(spans: list[SpanRecord]) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def one_tool_turn(t: Transcript, n: str = "1") -> None:
    t.prompt(f"list files {n}", parent=t.last)
    t.response(f"msg_a{n}", [thinking(), text("let me look"), tool_use(f"toolu_{n}")], stop_reason="tool_use")
    tool_line = t.last
    t.tool_result(f"toolu_{n}", "a b c", source=tool_line)
    t.response(f"msg_b{n}", [text("done")], stop_reason="end_turn",
               usage={"input_tokens": 7, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 13,
                      "output_tokens": 17})


def test_one_turn_tree_and_exact_usage(tmp_path):
    t = Transcript(SID)
    one_tool_turn(t)
    t.write(os.path.join(proj(str(tmp_path)), f"{SID}.jsonl"))
    spans, _ = run(str(tmp_path))
    names = by_name(spans)
    assert Counter(s.name for s in spans) == {
        "invoke_agent claude-code": 1, "chat claude-opus-4-6": 2, "execute_tool Bash": 1}
    root = names["invoke_agent claude-code"][0]
    assert root.parent_span_id is None
    assert root.attributes["gen_ai.conversation.id"] == SID
    assert {s.trace_id for s in spans} == {root.trace_id}
    chats = sorted(names["chat claude-opus-4-6"], key=lambda s: s.start_ns)
    assert all(c.parent_span_id == root.span_id for c in chats)
    tool = names["execute_tool Bash"][0]
    assert tool.parent_span_id == chats[0].span_id
    assert tool.attributes["gen_ai.tool.call.id"] == "toolu_1"
    assert tool.status is StatusCode.UNSET
    # three lines of msg_a1 repeat the usage: counted once, with the final (largest) output
    a = chats[0].attributes
    assert a["gen_ai.usage.output_tokens"] == 50
    assert a["gen_ai.usage.input_tokens"] == 3 + 100 + 1000
    assert a["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 100
    assert a["claude_code.usage.input_tokens"] == 3
    assert a["claude_code.message.lines"] == 3
    assert a["gen_ai.response.id"] == "msg_a1"
    assert a["claude_code.request_id"] == "req_msg_a1"
    assert a["gen_ai.response.finish_reasons"] == ("tool_use",)
    b = chats[1].attributes
    assert (b["gen_ai.usage.input_tokens"], b["gen_ai.usage.output_tokens"]) == (7 + 11 + 13, 17)
    # the chat span starts at the line it answers, ends at its last line
    assert chats[0].start_ns == root.start_ns
    assert tool.start_ns <= tool.end_ns <= chats[1].start_ns
    assert root.end_ns == chats[1].end_ns
    assert root.attributes["claude_code.turn.outcome"] == "completed"


def test_two_turns_two_traces_and_deterministic_ids(tmp_path):
    t = Transcript(SID)
    one_tool_turn(t, "1")
    one_tool_turn(t, "2")
    t.write(os.path.join(proj(str(tmp_path)), f"{SID}.jsonl"))
    first, _ = run(str(tmp_path))
    second, _ = run(str(tmp_path))
    roots = [s for s in first if s.parent_span_id is None]
    assert len(roots) == 2 and roots[0].trace_id != roots[1].trace_id
    key = lambda s: (s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns)  # noqa: E731
    assert sorted(map(key, first)) == sorted(map(key, second))
    assert len({s.span_id for s in first}) == len(first)


def test_orphaned_tool_use_becomes_a_dead_branch_after_resume(tmp_path):
    t = Transcript(SID)
    t.prompt("run the long thing", parent=None)
    t.response("msg_1", [text("running"), tool_use("toolu_sleep", command="sleep 600")], stop_reason="tool_use")
    before_orphan = t.lines[-2]["uuid"]  # the text line: resume parents the new prompt here
    # process SIGKILLed: no tool_result. Resumed later with a new prompt on the line before the orphan.
    t.t_ms += 3_600_000
    t.prompt("what happened?", parent=before_orphan)
    t.response("msg_2", [text("it was killed")], stop_reason="end_turn")
    t.write(os.path.join(proj(str(tmp_path)), f"{SID}.jsonl"))
    spans, _ = run(str(tmp_path))
    tool = by_name(spans)["execute_tool Bash"][0]
    assert tool.status is StatusCode.ERROR
    assert tool.attributes["error.type"] == "orphaned"
    roots = sorted((s for s in spans if s.parent_span_id is None), key=lambda s: s.start_ns)
    assert [r.attributes["claude_code.turn.outcome"] for r in roots] == ["orphaned", "completed"]
    assert roots[0].status is StatusCode.ERROR
    assert tool.trace_id == roots[0].trace_id
    chat2 = [s for s in spans if s.attributes.get("gen_ai.response.id") == "msg_2"][0]
    assert chat2.trace_id == roots[1].trace_id


def test_recent_open_tool_call_is_left_open_by_backfill(tmp_path):
    import time

    t = Transcript(SID, t_ms=int(time.time() * 1000) - 5_000)
    t.prompt("long", parent=None)
    t.response("msg_1", [tool_use("toolu_x", command="sleep 60")], stop_reason="tool_use")
    t.write(os.path.join(proj(str(tmp_path)), f"{SID}.jsonl"))
    spans, p = run(str(tmp_path), close_all=False)
    assert spans == []
    assert p.assembler.open_count() == 1


def subagent_files(root: str, main: Transcript, agent_id: str, tool_id: str, agent_type: str = "Explore",
                   meta: bool = True, n_calls: int = 2) -> Transcript:
    sid = main.session_id
    sub = Transcript(sid, agent_id=agent_id, t_ms=main.t_ms)
    sub.prompt(f"subagent task {agent_id}", parent=None)
    for i in range(n_calls - 1):
        sub.response(f"msg_{agent_id}_{i}", [tool_use(f"toolu_{agent_id}_{i}", name="Read")], stop_reason="tool_use")
        sub.tool_result(f"toolu_{agent_id}_{i}", "content")
    sub.response(f"msg_{agent_id}_end", [text("report")], stop_reason="end_turn")
    d = os.path.join(proj(root), sid, "subagents")
    sub.write(os.path.join(d, f"agent-{agent_id}.jsonl"))
    if meta:
        with open(os.path.join(d, f"agent-{agent_id}.meta.json"), "wb") as f:
            f.write(orjson.dumps({"agentType": agent_type, "description": "look around",
                                  "toolUseId": tool_id, "spawnDepth": 1}))
    main.t_ms = max(main.t_ms, sub.t_ms)
    return sub


def test_parallel_subagents_hang_under_their_task_tool(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("explore twice", parent=None)
    t.response("msg_1", [tool_use("toolu_t1", name="Task", subagent_type="Explore", prompt="subagent task a1",
                                  description="one"),
                         tool_use("toolu_t2", name="Task", subagent_type="Plan", prompt="subagent task a2",
                                  description="two")], stop_reason="tool_use")
    subagent_files(root, t, "a1", "toolu_t1", "Explore")
    subagent_files(root, t, "a2", "toolu_t2", "Plan", meta=False)  # linked through toolUseResult only
    t.tool_result("toolu_t1", "report", tool_use_result={"status": "completed", "agentId": "a1"})
    t.tool_result("toolu_t2", "report", tool_use_result={"status": "completed", "agentId": "a2"})
    t.response("msg_2", [text("both done")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    spans, _ = run(root)
    ids = {s.span_id: s for s in spans}
    assert len(ids) == len(spans)
    assert len({s.trace_id for s in spans}) == 1
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name == "execute_tool Task"}
    agents = {s.attributes["claude_code.agent_id"]: s for s in spans
              if s.name.startswith("invoke_agent") and s.parent_span_id}
    assert agents["a1"].name == "invoke_agent Explore" and agents["a2"].name == "invoke_agent Plan"
    assert agents["a1"].parent_span_id == tools["toolu_t1"].span_id
    assert agents["a2"].parent_span_id == tools["toolu_t2"].span_id
    assert agents["a1"].attributes["claude_code.agent.link"] in ("meta", "result")  # both name it
    assert agents["a2"].attributes["claude_code.agent.link"] == "result"
    for aid in ("a1", "a2"):
        chats = [s for s in spans if s.attributes.get("gen_ai.response.id", "").startswith(f"msg_{aid}_")]
        assert len(chats) == 2 and all(c.parent_span_id == agents[aid].span_id for c in chats)
        inner_tools = [s for s in spans if s.attributes.get("gen_ai.tool.call.id", "").startswith(f"toolu_{aid}_")]
        assert len(inner_tools) == 1 and ids[inner_tools[0].parent_span_id].name.startswith("chat")


def test_nested_and_background_subagents(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_bg", name="Agent", subagent_type="general-purpose",
                                  prompt="subagent task bg", run_in_background=True)], stop_reason="tool_use")
    t.tool_result("toolu_bg", "Async agent launched successfully.",
                  tool_use_result={"isAsync": True, "status": "async_launched", "agentId": "bg"})
    t.response("msg_2", [text("launched")], stop_reason="end_turn")
    # the background agent spawns a nested agent, and finishes after the main turn
    outer = Transcript(SID, agent_id="bg", t_ms=t.t_ms)
    outer.prompt("subagent task bg", parent=None)
    outer.response("msg_bg_1", [tool_use("toolu_nested", name="Agent", subagent_type="Explore",
                                         prompt="subagent task nested")], stop_reason="tool_use")
    inner = subagent_files(root, outer, "nested", "toolu_nested", "Explore")
    outer.tool_result("toolu_nested", "found", tool_use_result={"status": "completed", "agentId": "nested"})
    outer.response("msg_bg_2", [text("bg done")], stop_reason="end_turn")
    outer.write(os.path.join(proj(root), SID, "subagents", "agent-bg.jsonl"))
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    assert inner.lines
    spans, _ = run(root)
    ids = {s.span_id: s for s in spans}
    assert len({s.trace_id for s in spans}) == 1
    agents = {s.attributes["claude_code.agent_id"]: s for s in spans
              if s.name.startswith("invoke_agent") and s.attributes.get("claude_code.agent_id")}
    bg_tool = [s for s in spans
               if s.attributes.get("gen_ai.tool.call.id") == "toolu_bg" and s.name.startswith("execute")][0]
    assert agents["bg"].parent_span_id == bg_tool.span_id
    assert agents["bg"].attributes["claude_code.agent.background"] is True
    nested_tool = ids[agents["nested"].parent_span_id]
    assert nested_tool.attributes["gen_ai.tool.call.id"] == "toolu_nested"
    assert ids[nested_tool.parent_span_id].attributes["gen_ai.response.id"] == "msg_bg_1"
    assert ids[ids[nested_tool.parent_span_id].parent_span_id] is agents["bg"]
    assert agents["bg"].end_ns > ids[bg_tool.parent_span_id].end_ns  # outlives the main turn's call


def test_subagent_file_read_before_its_parent_still_links(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_t", name="Task", subagent_type="Explore", prompt="subagent task zz")],
               stop_reason="tool_use")
    subagent_files(root, t, "zz", "toolu_t", meta=False)
    t.tool_result("toolu_t", "r", tool_use_result={"status": "completed", "agentId": "zz"})
    t.response("msg_2", [text("ok")], stop_reason="end_turn")
    main_path = t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,)), emit=spans.extend)
    p.poll([os.path.join(proj(root), SID, "subagents", "agent-zz.jsonl")])
    assert spans == []  # its trace is not known yet
    p.poll([main_path])
    p.assembler.flush(None)
    p._emit()
    agent = [s for s in spans
             if s.name.startswith("invoke_agent") and s.attributes.get("claude_code.agent_id") == "zz"][0]
    task = [s for s in spans if s.name == "execute_tool Task"][0]
    assert agent.parent_span_id == task.span_id and agent.trace_id == task.trace_id
    assert len([s for s in spans if s.trace_id == task.trace_id]) == len(spans)


def test_inline_sidechain_of_1_0_linked_by_prompt(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID, version="1.0.17")
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_a", name="Task", prompt="first job", description="a"),
                         tool_use("toolu_b", name="Task", prompt="second job", description="b")],
               stop_reason="tool_use")
    task_line = t.last
    # sidechains inline in the main file, in completion order, no agentId
    for job, mid in (("second job", "msg_sb"), ("first job", "msg_sa")):
        t.raw({**t.lines[0], "uuid": f"root-{mid}", "parentUuid": None, "isSidechain": True,
               "message": {"role": "user", "content": job}, "timestamp": "2025-06-15T15:06:41.000Z"})
        t.last = f"root-{mid}"
        t.response(mid, [text("side")], stop_reason="end_turn")
        t.lines[-1]["isSidechain"] = True
    t.tool_result("toolu_b", "b done", parent=task_line)
    t.tool_result("toolu_a", "a done")
    t.response("msg_2", [text("done")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    spans, _ = run(root)
    ids = {s.span_id: s for s in spans}
    for mid, tool_id in (("msg_sa", "toolu_a"), ("msg_sb", "toolu_b")):
        chat = [s for s in spans if s.attributes.get("gen_ai.response.id") == mid][0]
        agent = ids[chat.parent_span_id]
        assert agent.name.startswith("invoke_agent") and agent.attributes["claude_code.agent.link"] == "prompt"
        assert ids[agent.parent_span_id].attributes["gen_ai.tool.call.id"] == tool_id


def test_replayed_session_copy_counts_each_api_call_once(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    one_tool_turn(t, "1")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    copy = Transcript("99999999-2222-4333-8444-555555555555")
    copy.lines = [{**d, "sessionId": copy.session_id} for d in t.lines]
    copy.last = t.last
    copy.t_ms = t.t_ms
    one_tool_turn(copy, "2")
    copy.write(os.path.join(proj(root), f"{copy.session_id}.jsonl"))
    spans, _ = run(root)
    chat_ids = Counter(s.attributes["gen_ai.response.id"] for s in spans if s.name.startswith("chat"))
    assert chat_ids == {"msg_a1": 1, "msg_b1": 1, "msg_a2": 1, "msg_b2": 1}
    assert sum(1 for s in spans if s.parent_span_id is None) == 2


def test_api_errors_and_failing_tools(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("go", parent=None)
    t.system("api_error", retryAttempt=1, maxRetries=10, retryInMs=500,
             error={"status": 529, "error": {"type": "overloaded_error"}})
    t.response("msg_1", [tool_use("toolu_f", command="false")], stop_reason="tool_use")
    t.tool_result("toolu_f", "Exit code 1", is_error=True)
    t.tool_result("toolu_never_used", "stray")  # a result without a call: counted, not fatal
    t.raw({**t.lines[-1], "type": "assistant", "uuid": "synthetic-1", "parentUuid": t.last,
           "isApiErrorMessage": True, "error": "unknown",
           "message": {"id": "3b0e1c7e-synthetic", "model": "<synthetic>", "role": "assistant",
                       "stop_reason": "stop_sequence",
                       "content": [{"type": "text", "text": "API Error: 400 {\"type\":\"error\"}"}],
                       "usage": {"input_tokens": 0, "output_tokens": 0}}})
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    spans, p = run(root)
    tool = [s for s in spans if s.name == "execute_tool Bash"][0]
    assert tool.status is StatusCode.ERROR and tool.attributes["error.type"] == "tool_error"
    err = [s for s in spans if s.attributes.get("gen_ai.response.id") == "3b0e1c7e-synthetic"][0]
    assert err.status is StatusCode.ERROR and err.attributes["error.type"] == "400"
    assert err.name == "chat"
    root_span = [s for s in spans if s.parent_span_id is None][0]
    assert root_span.attributes["claude_code.turn.api_retries"] == 1
    assert root_span.attributes["claude_code.turn.api_errors"] == 1
    assert p.assembler.counters["unmatched_tool_results"] == 1


def test_compaction_keeps_the_turn_and_is_an_event(tmp_path):
    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_1")], stop_reason="tool_use")
    last = t.tool_result("toolu_1", "x")
    t.system("compact_boundary", parent=None, logicalParentUuid=last, content="Conversation compacted",
             compactMetadata={"trigger": "auto", "preTokens": 155250})
    t._env("user", t.last, message={"role": "user", "content": "This session is being continued..."},
           isCompactSummary=True, isVisibleInTranscriptOnly=True)
    t.response("msg_2", [text("continuing")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    spans, _ = run(root)
    roots = [s for s in spans if s.parent_span_id is None]
    assert len(roots) == 1
    assert [e.name for e in roots[0].events] == ["claude_code.compaction"]
    assert roots[0].events[0].attributes["claude_code.compaction.pre_tokens"] == 155250
    assert len([s for s in spans if s.name.startswith("chat")]) == 2


def test_content_is_not_exported_unless_asked(tmp_path):
    from ccotel.spans.content import ContentPolicy

    root = str(tmp_path)
    t = Transcript(SID)
    t.prompt("my key is sk-ant-api03-SECRETSECRETSECRET", parent=None)
    t.response("msg_1", [tool_use("toolu_1", command="echo AKIAABCDEFGHIJKLMNOP")], stop_reason="tool_use")
    t.tool_result("toolu_1", "x" * 10_000)
    t.response("msg_2", [text("ok")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    plain, _ = run(root)
    dump = repr([s.attributes for s in plain])
    assert "sk-ant" not in dump and "AKIA" not in dump and "my key" not in dump
    captured, _ = run(root, content=ContentPolicy(max_length=100))
    dump = repr([s.attributes for s in captured])
    assert "my key is" in dump and "SECRETSECRET" not in dump and "AKIAABCDEFGHIJKLMNOP" not in dump
    tool = [s for s in captured if s.name == "execute_tool Bash"][0]
    assert len(tool.attributes["gen_ai.tool.call.result"]) <= 100 + len("...[truncated]")


def _background_agent_then_notification() -> Transcript:
    """A turn that starts a background agent and ends; the agent's notification comes 30 s later
    and the model answers it."""
    t = Transcript(SID)
    t.prompt("start a helper in the background", parent=None)
    t.response("msg_n1", [tool_use("toolu_bg", "Agent", prompt="help", run_in_background=True)],
               stop_reason="tool_use")
    t.tool_result("toolu_bg", "Async agent launched", source=t.last)
    t.response("msg_n2", [text("it runs in the background")], stop_reason="end_turn")
    t.t_ms += 30_000
    t.prompt("<task-notification>\n<task-id>a1</task-id>\n<status>completed</status>\n</task-notification>")
    t.response("msg_n3", [text("the helper reported")], stop_reason="end_turn")
    return t


def _woken_after_the_final_answer(wake: str) -> Transcript:
    """A turn that ends (its final answer, then turn_duration), and a wake-up seconds later that is
    no human prompt, as shared/realdata has them (2.1.220-2.1.232): an ``isMeta`` message from a
    background agent of another session (``origin.kind: peer``), or a scheduled ``/loop`` wake-up (a
    system ``scheduled_task_fire`` line, then the loop's prompt as an ``isMeta`` line). The model
    answers 4 s after the wake-up line."""
    t = Transcript(SID, version="2.1.232")
    t.prompt("start the reviewer in the background", parent=None)
    t.response("msg_w1", [text("the reviewer runs; I will wait for its verdict")], stop_reason="end_turn")
    t.system("turn_duration", durationMs=900)
    t.t_ms += 30_000
    if wake == "peer":
        t.prompt("Another Claude session sent a message:\n<agent-message from=\"review\">\nLGTM\n</agent-message>",
                 isMeta=True, origin={"kind": "peer", "from": "review", "name": "review"})
    else:
        t.system("scheduled_task_fire", content="Claude resuming /loop wakeup")
        t.prompt("Check the CI status and report it to the user.", isMeta=True)
    t.t_ms += 4_000
    t.response("msg_w2", [text("looking"), tool_use("toolu_w2")], stop_reason="tool_use")
    t.tool_result("toolu_w2", "all green", source=t.last)
    t.response("msg_w3", [text("the review passed and CI is green")], stop_reason="end_turn")
    t.system("turn_duration", durationMs=5000)
    return t


def _read_live(t: Transcript, root: str, step_ns: int) -> list[SpanRecord]:
    """The lines appended one by one, the clock ``step_ns`` on between them, a tick after each."""
    live_path = os.path.join(proj(root), f"{SID}.jsonl")
    os.makedirs(os.path.dirname(live_path))
    open(live_path, "wb").close()
    now = [1_750_000_000_000_000_000]  # the transcript's own time: its lines are not in the future
    live: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,)), emit=live.extend, clock=lambda: now[0])
    p.backfill()
    for line in t.lines:
        with open(live_path, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")
        p.poll([live_path])
        now[0] += step_ns
        p.tick()
    p.backfill(close_all=True)
    return live


@pytest.mark.parametrize("wake", ["peer", "scheduled"])
def test_a_wake_up_after_the_final_answer_is_traced_alike_however_it_is_read(tmp_path, wake):
    """A turn ends at its final answer, in the transcript: a new API call after it starts a trace of its
    own (trigger continuation), whether the lines are read all at once (a backfill) or live, the turn
    closed a second after its final answer or not yet (lines 0.1 s apart), not by when it is read."""
    t = _woken_after_the_final_answer(wake)
    path = os.path.join(proj(str(tmp_path / "all")), f"{SID}.jsonl")
    t.write(path)
    at_once, _ = run(str(tmp_path / "all"))
    turns = sorted((s for s in at_once if s.parent_span_id is None), key=lambda s: s.start_ns)
    assert [s.attributes["claude_code.turn.trigger"] for s in turns] == ["prompt", "continuation"]
    answer = next(s for s in at_once if s.attributes.get("gen_ai.response.id") == "msg_w3")
    assert (answer.trace_id, answer.parent_span_id) == (turns[1].trace_id, turns[1].span_id)
    for step_ns in (5_000_000_000, 100_000_000):
        assert _ids(_read_live(t, str(tmp_path / f"live{step_ns}"), step_ns)) == _ids(at_once), step_ns


def _ids(spans: list[SpanRecord]) -> set[tuple[int, int, int | None, str]]:
    return {(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in spans}


def test_a_late_notification_is_a_turn_of_its_own_live_and_in_backfill(tmp_path):
    """The same trace ids however the lines are read: all at once (a backfill, where the turn is
    still open when the notification is read) or one by one with seconds between them (live,
    where the turn was closed after its final answer)."""
    t = _background_agent_then_notification()
    path = os.path.join(proj(str(tmp_path / "all")), f"{SID}.jsonl")
    t.write(path)
    at_once, _ = run(str(tmp_path / "all"))
    turns = sorted((s for s in at_once if s.parent_span_id is None), key=lambda s: s.start_ns)
    assert [s.attributes["claude_code.turn.trigger"] for s in turns] == ["prompt", "notification"]
    assert len({s.trace_id for s in turns}) == 2
    answer = next(s for s in at_once if s.attributes.get("gen_ai.response.id") == "msg_n3")
    assert (answer.trace_id, answer.parent_span_id) == (turns[1].trace_id, turns[1].span_id)

    live = _read_live(t, str(tmp_path / "live"), 5_000_000_000)  # seconds apart: the first turn closes
    assert _ids(live) == _ids(at_once)
