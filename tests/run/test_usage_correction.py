"""A call's final snapshot read after its span went out (live): the counters and the ledger take the
difference, once, across restarts; the span sent keeps what was known then (docs/durability.md)."""

from __future__ import annotations

import os

from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger
from ccotel.store.sqlite import SqliteState
from tests.rules.test_peer_cases import SID, line, prompt, write

OPUS = "claude-opus-4-6"
V = "2.1.87"


def start(root: str, state_dir: str, sent: list[SpanRecord], clock: list[int], m: Metrics) -> Pipeline:
    holder: list[Pipeline] = []

    def emit(spans: list[SpanRecord]) -> None:
        sent.extend(spans)
        holder[0].acknowledge(spans)

    p = Pipeline(Options(roots=(root,)), emit=emit, state=SqliteState(state_dir), metrics=m,
                 ledger=Ledger.in_state_dir(state_dir), clock=lambda: clock[0])
    holder.append(p)
    return p


def ledger_output(state_dir: str) -> dict[str, int]:
    ledger = Ledger.in_state_dir(state_dir)
    try:
        return {c.key: c.usage[1] for c in ledger.calls()}
    finally:
        ledger.close()


def test_a_final_snapshot_read_after_the_span_went_out_corrects_counts_and_ledger_once(tmp_path):
    root, st = tmp_path / "claude", str(tmp_path / "st")
    (root / "projects").mkdir(parents=True)
    clock = [1_767_225_700 * 10**9]
    sent: list[SpanRecord] = []
    m = Metrics()
    p = start(str(root), st, sent, clock, m)
    p.backfill()
    p.go_live(0.0)
    # live: a turn whose first call is written early (59, stop_reason null), then the final answer
    early = line("a1", "p1", "msg_1", 59, stop=None, version=V, ts="2026-01-01T00:01:41.000Z")
    write(root, f"{SID}.jsonl", [prompt("p1", ts="2026-01-01T00:01:40.000Z"), early,
                                 line("b1", "a1", "msg_2", 12, rid="req_2", version=V,
                                      ts="2026-01-01T00:01:42.000Z")])
    main = str(root / "projects" / "-p" / f"{SID}.jsonl")
    p.poll([main])
    clock[0] += 5 * 10**9
    p.tick()
    chats = {s.attributes["gen_ai.response.id"]: s for s in sent if s.name.startswith("chat")}
    assert chats["msg_1"].attributes["gen_ai.usage.output_tokens"] == 59  # what was known then
    assert m.value("ccotel_tokens", OPUS, "output") == 59 + 12
    # the compaction agent's file brings msg_1's final snapshot, after its span went out
    final = line("a1", "p1", "msg_1", 6234, stop="tool_use", version=V, isSidechain=True, agentId="acompact-1a2b3c",
                 ts="2026-01-01T00:01:41.000Z")
    write(root, f"{SID}/subagents/agent-acompact-1a2b3c.jsonl",
          [{**prompt("c1", ts="2026-01-01T00:01:43.000Z"), "isSidechain": True, "agentId": "acompact-1a2b3c"},
           {**final, "uuid": "c2", "parentUuid": "c1"}])
    agent = str(root / "projects" / "-p" / SID / "subagents" / "agent-acompact-1a2b3c.jsonl")
    n_sent = len(sent)
    p.poll([agent])
    clock[0] += 5 * 10**9
    p.tick()
    p.process_acks()
    assert not [s for s in sent[n_sent:] if s.name.startswith("chat") and
                s.attributes.get("gen_ai.response.id") == "msg_1"]  # no second span of the call
    assert m.value("ccotel_tokens", OPUS, "output") == 6234 + 12
    assert m.value("ccotel_corrected_tokens", OPUS, "output") == 6234 - 59
    assert m.value("ccotel_api_calls", OPUS) == 2
    assert ledger_output(st)["msg_1:req_1"] == 6234
    cost = m.value("ccotel_cost_usd", OPUS)
    # a restart reads nothing twice: the same totals, the correction not counted again
    m2 = Metrics()
    p2 = start(str(root), st, sent, clock, m2)
    p2.backfill()
    p2.poll([main, agent])
    p2.tick()
    p2.process_acks()
    assert m2.value("ccotel_tokens", OPUS, "output") == 6234 + 12
    assert m2.value("ccotel_corrected_tokens", OPUS, "output") == 6234 - 59
    assert abs(m2.value("ccotel_cost_usd", OPUS) - cost) < 1e-9
    assert ledger_output(st)["msg_1:req_1"] == 6234


def test_a_correction_not_committed_before_a_restart_is_counted_after_it_once(tmp_path):
    """The process stops after reading the copy, before any commit: the next one reads the copy
    again and counts the difference from the ledger's row, once."""
    root, st = tmp_path / "claude", str(tmp_path / "st")
    (root / "projects").mkdir(parents=True)
    clock = [1_767_225_700 * 10**9]
    sent: list[SpanRecord] = []
    m = Metrics()
    p = start(str(root), st, sent, clock, m)
    p.backfill()
    p.go_live(3600.0)  # nothing committed from tick for an hour
    write(root, f"{SID}.jsonl", [prompt("p1", ts="2026-01-01T00:01:40.000Z"),
                                 line("a1", "p1", "msg_1", 59, stop=None, version=V, ts="2026-01-01T00:01:41.000Z"),
                                 line("b1", "a1", "msg_2", 12, rid="req_2", version=V,
                                      ts="2026-01-01T00:01:42.000Z")])
    main = str(root / "projects" / "-p" / f"{SID}.jsonl")
    p.poll([main])
    clock[0] += 5 * 10**9
    p.tick()
    p.process_acks()  # the turn committed: its spans, counts and ledger rows
    write(root, f"{SID}/subagents/agent-acompact-1a2b3c.jsonl",
          [{**prompt("c1", ts="2026-01-01T00:01:43.000Z"), "isSidechain": True, "agentId": "acompact-1a2b3c"},
           {**line("c2", "c1", "msg_1", 6234, stop="tool_use", version=V, isSidechain=True,
                   agentId="acompact-1a2b3c", ts="2026-01-01T00:01:41.000Z")}])
    agent = str(root / "projects" / "-p" / SID / "subagents" / "agent-acompact-1a2b3c.jsonl")
    p.poll([agent])
    assert m.value("ccotel_corrected_tokens", OPUS, "output") == 6234 - 59  # counted, not committed
    # killed here: nothing more is written
    m2 = Metrics()
    p2 = start(str(root), st, sent, clock, m2)
    p2.backfill()
    p2.poll([main, agent])
    clock[0] += 5 * 10**9
    p2.tick()
    p2.process_acks()
    assert m2.value("ccotel_tokens", OPUS, "output") == 6234 + 12
    assert m2.value("ccotel_corrected_tokens", OPUS, "output") == 6234 - 59
    assert ledger_output(st)["msg_1:req_1"] == 6234
    assert os.path.exists(agent)
