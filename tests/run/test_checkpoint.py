"""Acknowledged checkpoints: offsets move only past delivered spans; a restart loses nothing,
sends nothing twice, and keeps counter totals exact."""

from __future__ import annotations

import os
import stat
import time

from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.assemble.test_assemble import one_tool_turn, proj, subagent_files
from tests.transcript import Transcript, text, tool_use

SID = "dddddddd-1111-4222-8333-444444444444"


class Backend:
    """Receives spans; acknowledges unless told to refuse. Keeps every delivery."""

    def __init__(self) -> None:
        self.delivered: list[SpanRecord] = []
        self.refuse = False

    def connect(self, p: Pipeline):
        def emit(spans: list[SpanRecord]) -> None:
            if self.refuse:
                return  # lost in flight: never acknowledged
            self.delivered.extend(spans)
            p.acknowledge(spans)
        return emit


def start(root: str, state_dir: str, backend: Backend, clock=None, metrics: Metrics | None = None) -> Pipeline:
    holder: list[Pipeline] = []
    p = Pipeline(Options(roots=(root,)), emit=lambda spans: backend.connect(holder[0])(spans),
                 state=State(state_dir), metrics=metrics, **({"clock": clock} if clock else {}))
    holder.append(p)
    return p


def single_pass(root: str) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(root,)), emit=out.extend).backfill(close_all=True)
    return out


def ids(spans: list[SpanRecord]) -> list[int]:
    return sorted(s.span_id for s in spans)


def test_state_dir_is_private(tmp_path):
    State(str(tmp_path / "st"))
    assert stat.S_IMODE(os.stat(tmp_path / "st").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "st" / "state.db").st_mode) == 0o600


def test_restart_in_the_middle_of_an_open_turn(tmp_path):
    root = str(tmp_path / "claude")
    path = os.path.join(proj(root), f"{SID}.jsonl")
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 60_000)  # recent: its open tool may still run
    one_tool_turn(t, "1")
    one_tool_turn(t, "2")
    t.prompt("third", parent=t.last)
    t.response("msg_3a", [tool_use("toolu_3")], stop_reason="tool_use")
    first_part = t.bytes()
    t.lines = []
    t.tool_result("toolu_3", "ok")
    t.response("msg_3b", [text("done")], stop_reason="end_turn")
    rest = t.bytes()
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(first_part)
    backend = Backend()
    a = start(root, str(tmp_path / "st"), backend)
    a.backfill()  # turns 1 and 2 delivered; turn 3 still open (its tool runs)
    assert a.assembler.open_count() == 1
    delivered_before = len(backend.delivered)
    # restart: a new process with the same state; the open turn is re-read from its prompt
    with open(path, "ab") as f:
        f.write(rest)
    b = start(root, str(tmp_path / "st"), backend)
    b.backfill(close_all=True)
    assert b.stats.lines == 2 + 2  # turn 3's two lines again plus the two new; not turns 1 and 2
    assert len(backend.delivered) > delivered_before
    assert ids(backend.delivered) == ids(single_pass(root))  # each span exactly once


def test_unacknowledged_spans_are_sent_again_after_restart(tmp_path):
    root = str(tmp_path / "claude")
    t = Transcript(SID)
    one_tool_turn(t, "1")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    backend = Backend()
    backend.refuse = True
    a = start(root, str(tmp_path / "st"), backend)
    a.backfill(close_all=True)
    assert backend.delivered == []
    backend.refuse = False
    b = start(root, str(tmp_path / "st"), backend)
    b.backfill(close_all=True)
    assert ids(backend.delivered) == ids(single_pass(root))
    # and a third start reads nothing and sends nothing
    c = start(root, str(tmp_path / "st"), backend)
    c.backfill(close_all=True)
    assert c.stats.lines == 0 and ids(backend.delivered) == ids(single_pass(root))


def test_subagent_keeps_its_parent_turn_open_across_a_restart(tmp_path):
    root = str(tmp_path / "claude")
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 20_000)  # the background agent works right now
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_bg", name="Agent", subagent_type="Explore", prompt="subagent task bg",
                                  run_in_background=True)], stop_reason="tool_use")
    t.tool_result("toolu_bg", "launched", tool_use_result={"status": "async_launched", "agentId": "bg"})
    t.response("msg_2", [text("launched")], stop_reason="end_turn")
    main = t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    sub = subagent_files(root, t, "bg", "toolu_bg", n_calls=3)
    agent_path = os.path.join(proj(root), SID, "subagents", "agent-bg.jsonl")
    lines = sub.bytes().splitlines(keepends=True)
    with open(agent_path, "wb") as f:
        f.writelines(lines[:3])  # the background agent is still working
    backend = Backend()
    a = start(root, str(tmp_path / "st"), backend)
    a.backfill()
    with open(agent_path, "ab") as f:
        f.writelines(lines[3:])
    b = start(root, str(tmp_path / "st"), backend)
    b.backfill(close_all=True)
    expected = single_pass(root)
    assert ids(backend.delivered) == ids(expected)
    agent = [s for s in backend.delivered
             if s.name.startswith("invoke_agent") and s.attributes.get("claude_code.agent_id") == "bg"]
    assert len(agent) == 1
    assert agent[0].parent_span_id == [s for s in expected if s.name == "execute_tool Agent"][0].span_id
    assert os.path.exists(main)


def test_counters_count_live_events_once_across_restarts(tmp_path):
    root = str(tmp_path / "claude")
    path = os.path.join(proj(root), f"{SID}.jsonl")
    t = Transcript(SID)
    one_tool_turn(t, "1")  # history: there before ccotel first ran
    t.write(path)
    backend = Backend()
    m1 = Metrics()
    a = start(root, str(tmp_path / "st"), backend, metrics=m1)
    a.backfill(close_all=True)
    assert m1.value("ccotel_api_calls", "claude-opus-4-6") == 0  # history is not counted
    assert m1.value("ccotel_spans_exported") == 4
    # live: a second turn arrives, read half, then ccotel restarts
    t.lines = []
    one_tool_turn(t, "2")
    data = t.bytes().splitlines(keepends=True)
    with open(path, "ab") as f:
        f.writelines(data[:5])  # prompt, three lines of msg_a2, the tool result
    a.poll([path])
    a.tick()
    assert m1.value("ccotel_tool_calls", "Bash", "ok") == 1  # the tool span is complete and delivered
    assert m1.value("ccotel_api_calls", "claude-opus-4-6") == 0  # msg_a2 is open until the next response
    with open(path, "ab") as f:
        f.writelines(data[5:])
    m2 = Metrics()
    b = start(root, str(tmp_path / "st"), backend, metrics=m2)
    b.backfill(close_all=True)
    assert m2.value("ccotel_api_calls", "claude-opus-4-6") == 2  # msg_a2 and msg_b2, once each
    assert m2.value("ccotel_tool_calls", "Bash", "ok") == 1
    assert m2.value("ccotel_turns", "completed") == 1
    assert m2.value("ccotel_tokens", "claude-opus-4-6", "output") == 50 + 17
    assert m2.value("ccotel_spans_exported") == 8
    assert ids(backend.delivered) == ids(single_pass(root))


def test_missing_subagent_transcript_is_counted_once(tmp_path):
    root = str(tmp_path / "claude")
    os.makedirs(os.path.join(root, "projects"))
    clock = [int(time.time() * 1e9)]
    m = Metrics()
    backend = Backend()
    p = start(root, str(tmp_path / "st"), backend, clock=lambda: clock[0], metrics=m)
    p.backfill()
    t = Transcript(SID, t_ms=clock[0] // 1_000_000)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_t", name="Agent", subagent_type="Explore", prompt="p")],
               stop_reason="tool_use")
    t.tool_result("toolu_t", "done", tool_use_result={"status": "completed", "agentId": "a0000000000000001"})
    t.response("msg_2", [text("ok")], stop_reason="end_turn")
    path = t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    p.poll([path])
    p.tick()
    assert m.value("ccotel_missing_transcripts", "subagent") == 0  # not yet: it may still appear
    clock[0] += 200 * 10**9
    p.tick()
    p.tick()
    assert m.value("ccotel_missing_transcripts", "subagent") == 1
    m2 = Metrics()
    p2 = start(root, str(tmp_path / "st"), backend, clock=lambda: clock[0], metrics=m2)
    p2.backfill()
    p2.tick()
    assert m2.value("ccotel_missing_transcripts", "subagent") == 1


def test_meta_json_seen_again_after_a_catch_up_counts_no_missing_subagent(tmp_path):
    """The watcher's first walk reports every meta.json again; finished sessions must not come back
    as subagents without a transcript."""
    root = str(tmp_path / "claude")
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 3_600_000)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_t", name="Agent", subagent_type="Explore", prompt="subagent task a9")],
               stop_reason="tool_use")
    subagent_files(root, t, "a9", "toolu_t")
    t.tool_result("toolu_t", "r", tool_use_result={"status": "completed", "agentId": "a9"})
    t.response("msg_2", [text("ok")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    clock = [int(time.time() * 1e9)]
    m = Metrics()
    p = start(root, str(tmp_path / "st"), Backend(), clock=lambda: clock[0], metrics=m)
    p.backfill()
    p.poll([os.path.join(root, "projects")])  # the watcher's first event: the whole tree
    clock[0] += 600 * 10**9
    p.tick()
    assert m.value("ccotel_missing_transcripts", "subagent") == 0


def test_acked_ids_packed_per_owner_and_rows_of_older_states_still_count(tmp_path):
    from ccotel.store.sqlite import SqliteState as State
    from ccotel.store.state import Commit

    st = State(str(tmp_path))
    st._db.execute("INSERT INTO acked VALUES (?, ?)", (-5, "old-owner"))  # as a state before acked_ids
    big = (1 << 64) - 3
    st.commit(Commit(acked=[(1, "a"), (big, "a"), (7, "b")]))
    assert st.acked() == {1, big, 7, (1 << 64) - 5}
    assert st._db.execute("SELECT count(*) FROM acked_ids").fetchone()[0] == 2  # one row per owner
    st.commit(Commit(done_owners=["a", "old-owner"]))
    assert st.acked() == {7}
