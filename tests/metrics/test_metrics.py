"""Each metric of the contract, from real-CLI fixtures replayed live and from detector scenarios.

Fixtures are copied into a watched root after ccotel has caught up (so they count as live), then
the counters are compared with the fake API's ground truth and the scenario's known events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import orjson
import pytest
from prometheus_client.exposition import generate_latest

from ccotel.metrics.counters import Metrics, registry_for
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.harness.fixtures import load_fixture
from tests.transcript import Transcript, text, tool_use

SID = "12121212-1111-4222-8333-444444444444"


class Live:
    """A pipeline that has caught up on an empty root; files added later are live events."""

    def __init__(self, tmp_path, stall_s: float = 180.0) -> None:
        from ccotel.assemble.closing import Timeouts

        self.root = tmp_path / "claude"
        (self.root / "projects").mkdir(parents=True)
        self.now = [time.time_ns()]
        self.metrics = Metrics()
        holder: list[Pipeline] = []
        self.p = Pipeline(Options(roots=(str(self.root),), timeouts=Timeouts(stall_ns=int(stall_s * 1e9))),
                          emit=lambda spans: holder[0].acknowledge(spans), clock=lambda: self.now[0],
                          state=State(str(tmp_path / "st")), metrics=self.metrics)
        holder.append(self.p)
        self.p.backfill()

    def replay(self, fixture: str) -> None:
        shutil.copytree(load_fixture(fixture).config_dir / "projects", self.root / "projects", dirs_exist_ok=True)
        self.p.rescan()
        self.advance(3600)

    def advance(self, seconds: float) -> None:
        self.now[0] += int(seconds * 1e9)
        self.p.tick()

    def v(self, name: str, *labels: str) -> float:
        return self.metrics.value(name, *labels)


def sent(fixture: str) -> list[dict]:
    return [r for r in load_fixture(fixture).ground_truth if r.get("endpoint") == "messages" and r.get("matched")
            and r.get("status") == 200 and r.get("expect_in_transcript", True)]


def test_calls_tokens_cost_tools_subagents(tmp_path):
    live = Live(tmp_path)
    live.replay("s03_parallel_subagents")
    gt = sent("s03_parallel_subagents")
    model = gt[0]["model"]
    assert live.v("ccotel_api_calls", model) == len(gt)
    for kind, key in (("input", "input_tokens"), ("output", "output_tokens"),
                      ("cache_read", "cache_read_input_tokens"), ("cache_creation", "cache_creation_input_tokens")):
        assert live.v("ccotel_tokens", model, kind) == sum(r["usage"][key] for r in gt), kind
    assert live.v("ccotel_cost_usd", model) > 0
    tools = [b for r in gt for b in r["blocks"] if b["type"] == "tool_use"]
    assert live.v("ccotel_tool_calls", "Agent", "ok") == sum(1 for b in tools if b["name"] == "Agent") == 2
    assert live.v("ccotel_tool_calls", "Bash", "ok") == sum(1 for b in tools if b["name"] == "Bash") == 2
    assert live.v("ccotel_tool_duration_seconds_count", "Bash") == 2
    assert live.v("ccotel_subagents", "general-purpose") == 2
    assert live.v("ccotel_turns", "completed") == 1
    assert live.v("ccotel_lines_read") > 0 and live.v("ccotel_bytes_read") > 0


def test_api_errors_tool_errors_compactions_interrupts(tmp_path):
    live = Live(tmp_path)
    for name in ("s07_api_errors", "s08_failing_tool", "s10_compact", "s11_interrupt"):
        live.replay(name)
    assert live.v("ccotel_api_errors", "400") == 1  # s07: the non-retryable 400; the 529 was retried
    assert live.v("ccotel_tool_calls", "Bash", "tool_error") == 1  # s08
    assert live.v("ccotel_compactions", "manual") == 1  # s10: /compact
    assert live.v("ccotel_user_interrupts") == 2  # s11: once during a tool, once waiting for the API
    assert live.v("ccotel_tool_calls", "Bash", "rejected") == 1


def test_stalled_turn_counted_once_as_what_it_turned_out_to_be(tmp_path):
    live = Live(tmp_path, stall_s=10)
    t = Transcript(SID, t_ms=live.now[0] // 1_000_000)
    t.prompt("slow", parent=None)
    t.response("msg_1", [tool_use("toolu_slow", command="make")], stop_reason="tool_use")
    path = t.write(str(live.root / "projects" / "-p" / f"{SID}.jsonl"))
    # a live process writes it: sessions/<pid>.json names this very process
    sessions = live.root / "sessions"
    sessions.mkdir()
    me = os.getpid()
    start = open(f"/proc/{me}/stat").read().rsplit(")", 1)[1].split()[19]
    (sessions / f"{me}.json").write_bytes(orjson.dumps({"pid": me, "sessionId": SID, "procStart": start}))
    live.p.poll([path])
    live.advance(30)  # silent past the stall timeout while the tool owes a result, process alive
    assert live.p.assembler.stalled_now() == 1
    assert live.v("ccotel_stalled_turns", "recovered") == 0  # not counted until its fate is known
    t.lines = []
    t.t_ms = live.now[0] // 1_000_000
    t.tool_result("toolu_slow", "built")
    t.response("msg_2", [text("done")], stop_reason="end_turn")
    with open(path, "ab") as f:
        f.write(t.bytes())
    live.p.poll([path])
    live.advance(5)
    assert live.v("ccotel_stalled_turns", "recovered") == 1
    assert live.v("ccotel_orphaned_tool_uses", "Bash") == 0
    assert live.v("ccotel_turns", "completed") == 1


def test_killed_process_closes_its_turn_at_once(tmp_path):
    _killed(tmp_path)


def _killed(tmp_path):
    """A turn whose process is dead (sessions/<pid>.json names a finished pid), left on a tool call."""
    live = Live(tmp_path, stall_s=600)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sessions = live.root / "sessions"
    sessions.mkdir()
    (sessions / f"{dead.pid}.json").write_bytes(orjson.dumps({"pid": dead.pid, "sessionId": SID,
                                                              "procStart": "1"}))
    t = Transcript(SID, t_ms=live.now[0] // 1_000_000)
    t.prompt("work", parent=None)
    t.response("msg_1", [tool_use("toolu_k", command="sleep 999")], stop_reason="tool_use")
    path = t.write(str(live.root / "projects" / "-p" / f"{SID}.jsonl"))
    live.p.poll([path])
    live.advance(1)  # far less than the stall timeout: the dead pid says enough
    assert live.v("ccotel_killed_turns") == 1
    assert live.v("ccotel_orphaned_tool_uses", "Bash") == 1
    assert live.v("ccotel_turns", "killed") == 1
    # no session has restarted yet: a reset is counted when one resumes without the call
    assert live.v("ccotel_session_resets", "orphaned_tool_use", "transcript") == 0
    return live, t, path


@pytest.mark.parametrize("era", ["dead_branch", "repaired"])
def test_an_orphan_is_a_reset_only_if_the_resume_loses_it(tmp_path, era):
    """rules.py, orphans. Before the repair era a resume parents the new prompt before the
    orphaned tool_use (a dead branch: the conversation lost the call): one reset. 2.1.3xx writes a
    repair result and a madeBy "other" line and chains the prompt on them: no memory lost, no
    reset. Either way the orphan itself was counted once, live, and the repair counts nothing more."""
    live, t, path = _killed(tmp_path)
    prompt_uuid = t.lines[0]["uuid"]
    t.lines = []
    t.t_ms = live.now[0] // 1_000_000
    if era == "dead_branch":
        t.prompt("go on", parent=prompt_uuid)
    else:
        t.tool_result("toolu_k", "[Tool call interrupted: the session ended before this call's result was recorded, "
                      "so its outcome is unknown.]", is_error=True)
        t.response(str(uuid.uuid4()), [text("No response requested.")], model="<synthetic>",
                   stop_reason="stop_sequence", usage={"input_tokens": 0, "output_tokens": 0})
        t.lines[-1]["madeBy"] = "other"
        del t.lines[-1]["requestId"]
        t.prompt("go on")
    t.response("msg_2", [text("done")], stop_reason="end_turn")
    with open(path, "ab") as f:
        f.write(t.bytes())
    live.p.poll([path])
    live.advance(5)
    assert live.v("ccotel_session_resets", "orphaned_tool_use", "transcript") == (1 if era == "dead_branch" else 0)
    assert live.v("ccotel_orphaned_tool_uses", "Bash") == 1
    assert live.v("ccotel_api_calls", "claude-opus-4-6") == 2  # the repair line is no API call
    assert live.v("ccotel_turns", "completed") == 1


def test_orphan_after_stall_without_process_info_and_parse_errors(tmp_path):
    live = Live(tmp_path, stall_s=10)
    t = Transcript(SID, t_ms=live.now[0] // 1_000_000)
    t.prompt("work", parent=None)
    t.response("msg_1", [tool_use("toolu_o", command="sleep 999")], stop_reason="tool_use")
    path = t.write(str(live.root / "projects" / "-p" / f"{SID}.jsonl"))
    with open(path, "ab") as f:
        f.write(b"{not json\n")
    live.p.poll([path])
    live.advance(11)
    assert live.v("ccotel_stalled_turns", "orphaned") == 1
    assert live.v("ccotel_orphaned_tool_uses", "Bash") == 1
    assert live.v("ccotel_parse_errors", "malformed_json") == 1


def test_exposition_names_types_and_bounded_labels(tmp_path):
    live = Live(tmp_path)
    live.replay("s03_parallel_subagents")
    text_ = generate_latest(registry_for(live.metrics)).decode()
    assert "ccotel_api_calls_total{model=" in text_
    assert "# TYPE ccotel_tool_duration_seconds histogram" in text_
    assert 'ccotel_tool_duration_seconds_bucket{le="+Inf",tool="Bash"} 2.0' in text_
    assert "ccotel_build_info{version=" in text_
    # no session or user ids as labels
    for sid in load_fixture("s03_parallel_subagents").session_ids:
        assert sid not in text_


def _cost_states(fixture: str) -> dict[tuple[str, str], float]:
    """The last cost-state total of each process, per model, read straight from the files."""
    last: dict[tuple[str, str], float] = {}
    for path in load_fixture(fixture).transcripts:
        for line in path.read_bytes().splitlines():
            o = orjson.loads(line)
            if o.get("type") == "cost-state":
                for model, u in o["modelUsage"].items():
                    last[(str(o["startTime"]), model)] = u["costUSD"]
    return last


def test_claude_codes_own_cost_beside_the_estimate(tmp_path):
    """2.1.3xx cost-state lines: counted as increments per model, equal to each process's last
    running total, beside ccotel's estimate; across a restart mid-file nothing is counted twice."""
    name = "2.1.330-s02_resume_two_turns"
    expected: dict[str, float] = {}
    for (_start, model), total in _cost_states(name).items():
        expected[model] = expected.get(model, 0.0) + total
    assert expected and all(v > 0 for v in expected.values())
    live = Live(tmp_path)
    src = next(p for p in load_fixture(name).transcripts if "subagents" not in p.parts)
    lines = src.read_bytes().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if b'"cost-state"' in line][0] + 1  # after the first run's
    dest = live.root / "projects" / src.parent.name / src.name
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"".join(lines[:cut]))
    live.p.rescan()
    live.advance(3600)
    first = {m: live.v("ccotel_reported_cost_usd", m) for m in expected}
    assert 0 < sum(first.values()) < sum(expected.values())
    live.p.process_acks()  # checkpoints and counter totals committed
    # a restart: a new pipeline on the same state reads only what follows
    live2 = Live.__new__(Live)
    live2.root, live2.now, live2.metrics = live.root, live.now, Metrics()
    holder: list[Pipeline] = []
    live2.p = Pipeline(Options(roots=(str(live.root),)), emit=lambda spans: holder[0].acknowledge(spans),
                       clock=lambda: live.now[0], state=State(str(tmp_path / "st")), metrics=live2.metrics)
    holder.append(live2.p)
    live2.p.backfill()
    with open(dest, "ab") as f:
        f.write(b"".join(lines[cut:]))
    live2.p.poll([str(dest)])
    live2.advance(3600)
    for model, total in expected.items():
        assert live2.v("ccotel_reported_cost_usd", model) == pytest.approx(total, rel=1e-9)
    # ccotel's estimate of the same calls, at list prices from genai-prices: close to Claude Code's own
    estimate = sum(live2.v("ccotel_cost_usd", m) for m in expected)
    assert estimate == pytest.approx(sum(expected.values()), rel=0.05)


def test_counters_do_not_wait_for_the_trace_backend(tmp_path):
    """The trace backend down for the whole run: tokens, calls, turns and tools are counted when
    the spans are built, equal to the ground truth, and none of it is checkpointed as final until
    the backend takes the spans (a crash before then re-reads and counts them once more, never
    twice). Before: all zero until the backend answered."""
    from ccotel.export.memory_sink import MemorySink
    from ccotel.export.sinks import ExportQueue

    name = "2.1.330-s03_parallel_subagents"
    sink = MemorySink().retry(times=10 ** 6)  # never answers
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    now = [time.time_ns()]
    metrics = Metrics()
    state = State(str(tmp_path / "st"))
    queue = ExportQueue(sink, max_backoff_s=0.05)
    p = Pipeline(Options(roots=(str(root),)), emit=queue.submit, clock=lambda: now[0], state=state,
                 metrics=metrics)
    queue.on_ack = p.acknowledge
    p.backfill()
    shutil.copytree(load_fixture(name).config_dir / "projects", root / "projects", dirs_exist_ok=True)
    p.rescan()
    now[0] += 3600 * 10 ** 9
    p.tick()
    gt = sent(name)
    model = gt[0]["model"]
    assert sink.spans == [] and queue.pending() > 0
    assert metrics.value("ccotel_api_calls", model) == len(gt)
    assert metrics.value("ccotel_tokens", model, "output") == sum(r["usage"]["output_tokens"] for r in gt)
    assert metrics.value("ccotel_tokens", model, "cache_read") == sum(r["usage"]["cache_read_input_tokens"] for r in gt)
    assert metrics.value("ccotel_turns", "completed") == 1
    assert metrics.value("ccotel_subagents", "general-purpose") == 2
    assert metrics.snapshot("delivered") == {}  # nothing final yet: a restart counts them afresh
    with sink._cv:
        sink._script.clear()  # the backend answers again
    assert queue.flush(timeout_s=10)
    assert metrics.value("ccotel_api_calls", model) == len(gt)  # settled, not counted again
    assert metrics.snapshot("delivered")[f"delivered:ccotel_api_calls\x1f{model}"] == len(gt)
    queue.close(timeout_s=5)


def test_label_values_never_split(tmp_path):
    """Label values come from transcripts: a tool named "Ba\\x1fsh" stays one label value, in the
    exposition and across a checkpoint (was exported as tool="Ba",outcome="sh")."""
    from ccotel.metrics.counters import decode_key, encode_key
    from ccotel.records import SpanKind, SpanRecord, StatusCode

    odd = "Ba\x1fsh\\u001f\\"
    span = SpanRecord(trace_id=1, span_id=2, parent_span_id=3, name=f"execute_tool {odd}", kind=SpanKind.INTERNAL,
                      start_ns=0, end_ns=10 ** 9, attributes={"gen_ai.operation.name": "execute_tool",
                                                              "gen_ai.tool.name": odd}, status=StatusCode.UNSET)
    m = Metrics()
    m.observe_span(span)
    samples = [(s.name, s.labels, s.value) for fam in registry_for(m).collect() for s in fam.samples
               if s.name == "ccotel_tool_calls_total" and s.value]
    assert samples == [("ccotel_tool_calls_total", {"tool": odd, "outcome": "ok"}, 1.0)]
    again = Metrics()
    again.restore(m.snapshot())
    assert again.value("ccotel_tool_calls", odd, "ok") == 1.0
    assert decode_key(encode_key(("ccotel_tool_calls", odd, "ok"))) == ("ccotel_tool_calls", odd, "ok")


def test_a_scrape_during_ingest_never_fails(tmp_path):
    """The metrics server's thread reads the gauges while the pipeline thread adds files and
    sessions (was: "dictionary changed size during iteration" from gauges() and stalled_now())."""
    import threading

    live = Live(tmp_path, stall_s=1)
    errors: list[BaseException] = []
    scrapes = [0]
    stop = threading.Event()

    def scrape() -> None:
        for _ in range(100_000):
            if stop.is_set():
                return
            scrapes[0] += 1
            try:
                generate_latest(registry_for(live.metrics))
                live.p.gauges()
                live.p.assembler.stalled_now()
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)
                return

    live.metrics.gauges = live.p.gauges
    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for i in range(300):
            sid = f"{i:08x}-1111-4222-8333-444444444444"
            t = Transcript(sid, t_ms=live.now[0] // 1_000_000)
            t.prompt("go", parent=None)
            t.response(f"msg_{i}", [tool_use(f"toolu_{i}", command="make")], stop_reason="tool_use")
            path = t.write(str(live.root / "projects" / f"-p{i % 7}" / f"{sid}.jsonl"))
            live.p.poll([path])
            live.advance(0.5)
    finally:
        stop.set()
        scraper.join(timeout=30)
    assert errors == [] and scrapes[0] > 10
    assert live.v("ccotel_orphaned_tool_uses", "Bash") > 0  # the ingest did close turns meanwhile
