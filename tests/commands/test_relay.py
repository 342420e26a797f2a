"""ccotel relay: stream-json in, the same bytes out, spans with the transcript path's ids.

The streams are the real CLI's stdout captured by the harness with every fixture
(``runs/*/stdout.jsonl``, Claude Code 2.1.197 and 2.1.330, the parallel subagents of s03
included); the transcript spans they are compared with are built by the sidecar's pipeline from
the same run's transcripts. The live test (tests/e2e/test_live_relay.py) wraps the real CLI.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccotel.assemble import ids
from ccotel.commands.relay import counter_for, relay
from ccotel.export.memory_sink import MemorySink
from ccotel.export.sinks import ExportQueue
from ccotel.metrics import counters as metrics
from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sources.stream.assembler import StreamAssembler
from ccotel.sources.stream.lines import BlockDedupe, fingerprint
from ccotel.sources.stream.prompts import TranscriptPrompts
from tests.harness.fixtures import Fixture, list_fixtures, load_fixture

REPO = Path(__file__).resolve().parents[2]
RESULT_KEYS = ("subtype", "is_error", "num_turns", "duration_ms", "duration_api_ms", "total_cost_usd",
               "terminal_reason")


@pytest.fixture
def relay_metrics(monkeypatch: pytest.MonkeyPatch) -> Metrics:
    """A Metrics (the relay's counters are declared in ccotel.metrics)."""
    return Metrics()


# -- helpers -----------------------------------------------------------------------------------


def _streams(fx: Fixture) -> Iterator[tuple[str, bytes]]:
    for run in fx.runs:
        yield run["label"], (fx.root / run["stdout"]).read_bytes()


def _relay_bytes(data: bytes, assembler: StreamAssembler, count: Any = None, seed: int = 0) -> tuple[bytes, list[
        SpanRecord], Any]:
    """Run relay() over real pipes: ``data`` written in random chunks (lines split anywhere),
    what comes out read back. Returns (output, spans, RelayResult)."""
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    rng = random.Random(seed)
    out = bytearray()

    def write() -> None:
        i = 0
        while i < len(data):
            n = rng.choice((1, 7, 64, 500, 4096, 70000))
            os.write(src_w, data[i:i + n])
            i += n
        os.close(src_w)

    def read() -> None:
        while chunk := os.read(dst_r, 1 << 16):
            out.extend(chunk)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    spans: list[SpanRecord] = []
    result = relay(src_r, dst_w, assembler, spans.extend, count or (lambda *_a: None))
    os.close(dst_w)
    for t in threads:
        t.join(10)
    os.close(src_r)
    os.close(dst_r)
    return bytes(out), spans, result


def _transcript_spans(fx: Fixture) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(str(fx.config_dir),)), emit=spans.extend).backfill(close_all=True)
    return spans


def _identity(s: SpanRecord) -> str | None:
    """What names a span's thing on the stream: message id, tool_use id, agent id or prompt uuid."""
    a = s.attributes
    if a.get("gen_ai.operation.name") == "chat":
        return None if a.get("claude_code.advisor") else str(a.get("gen_ai.response.id"))
    if a.get("gen_ai.operation.name") == "execute_tool":
        return str(a["gen_ai.tool.call.id"])
    if a.get("gen_ai.agent.name") == "claude-code":
        return None  # the prompt uuid is never on the stream: checked through the chat spans' trace
    return str(a.get("claude_code.agent_id"))


# -- captured streams of both CLI versions -----------------------------------------------------


@pytest.mark.parametrize("name", list_fixtures())
def test_captured_stream_passes_through_and_matches_transcript_ids(name: str) -> None:
    fx = load_fixture(name)
    by_id = {s.span_id: s for s in _transcript_spans(fx)}
    relay_spans: list[SpanRecord] = []
    stream_text = ""
    for i, (label, data) in enumerate(_streams(fx)):
        assembler = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)))
        out, spans, result = _relay_bytes(data, assembler, seed=i)
        assert out == data, f"{label}: output differs from input"
        assert result.lines == len(data.splitlines()) and result.bad_lines == {}
        relay_spans += spans
        stream_text += data.decode()
    assert relay_spans
    for s in relay_spans:
        assert s.attributes["ccotel.source"] == "stream"
        if s.attributes.get("gen_ai.agent.name") == "claude-code":
            assert s.attributes["ccotel.relay.linked"] is True, s  # its prompt found in the transcript
        mine = by_id.get(s.span_id)
        assert mine is not None, f"no transcript span with the id of {s.name} {s.attributes}"
        assert (mine.trace_id, mine.parent_span_id, mine.name) == (s.trace_id, s.parent_span_id, s.name), s.name
    # Every span the stream can know (its message, tool_use or agent id is on it) is there.
    made = {s.span_id for s in relay_spans}
    for s in by_id.values():
        ident = _identity(s)
        if ident is not None and ident in stream_text:
            assert s.span_id in made, f"{s.name} {ident} is on the stream but the relay made no span"
    turns = {s.span_id for s in by_id.values() if s.parent_span_id is None}
    assert turns <= made  # every turn of the transcript, with its trace


def _result_records(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "result":
            out.append(rec)
    return out


def _check_result_attributes(turn: SpanRecord, result: dict[str, Any], label: str) -> None:
    attrs = turn.attributes
    for key in RESULT_KEYS:
        want = float(result[key]) if key == "total_cost_usd" else result[key]
        assert attrs[f"ccotel.result.{key}"] == want, (label, key)
    assert attrs["ccotel.result.usage.output_tokens"] == result["usage"]["output_tokens"]
    assert attrs["ccotel.result.permission_denials"] == len(result["permission_denials"])
    models = sorted(result["modelUsage"])
    if models:
        assert list(attrs["ccotel.result.model_usage.models"]) == models
        assert list(attrs["ccotel.result.model_usage.output_tokens"]) == [
            result["modelUsage"][k]["outputTokens"] for k in models]
    assert (turn.status is StatusCode.ERROR) == (result["is_error"] is True)
    assert "ccotel.result.count" not in attrs  # one result per query


@pytest.mark.parametrize("name", ["s03_parallel_subagents", "2.1.330-s03_parallel_subagents",
                                  "s04_background_subagent", "2.1.330-s04_background_subagent",
                                  "s07_api_errors", "2.1.330-s07_api_errors",
                                  "2.1.332-s03_parallel_subagents", "2.1.332-s04_background_subagent",
                                  "2.1.332-s07_api_errors"])
def test_result_becomes_turn_attributes_and_metrics(name: str, relay_metrics: Metrics) -> None:
    fx = load_fixture(name)
    for label, data in _streams(fx):
        results = _result_records(data)
        m = Metrics()
        assembler = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)), counter_for(m))
        _out, spans, _res = _relay_bytes(data, assembler, counter_for(m))
        # One turn per query, each with its own result: s04's notification is a query (and a turn)
        # of its own, and 2.1.x prints both results at the end, in query order.
        turns = sorted((s for s in spans if s.parent_span_id is None), key=lambda s: s.start_ns)
        assert len(turns) == len(results), label
        for turn, result in zip(turns, results, strict=True):
            _check_result_attributes(turn, result, label)
        last = results[-1]
        models = sorted(last["modelUsage"])
        # metrics: one per result; modelUsage is a running total, counted once
        assert sum(v for k, v in m.series().items() if k[0] == "ccotel_relay_results") == len(results)
        for model in models:
            assert m.value("ccotel_relay_tokens", model, "output") == last["modelUsage"][model]["outputTokens"]
            assert m.value("ccotel_relay_cost_usd", model) == pytest.approx(
                max(r["modelUsage"][model]["costUSD"] for r in results if model in r["modelUsage"]))
        assert m.value("ccotel_relay_lines") == len(data.splitlines())


@pytest.mark.parametrize("version_prefix", ["", "2.1.330-", "2.1.332-"])
def test_api_retry_on_the_turn_span(version_prefix: str, relay_metrics: Metrics) -> None:
    fx = load_fixture(version_prefix + "s07_api_errors")
    label, data = [(lbl, d) for lbl, d in _streams(fx) if b'"api_retry"' in d][0]
    retries = [json.loads(ln) for ln in data.splitlines() if b'"api_retry"' in ln]
    m = Metrics()
    assembler = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)), counter_for(m))
    _out, spans, _res = _relay_bytes(data, assembler)
    (turn,) = [s for s in spans if s.parent_span_id is None]
    assert turn.attributes["ccotel.turn.api_retries"] == len(retries) == 1
    (event,) = turn.events
    assert event.name == "ccotel.api_retry"
    assert event.attributes["ccotel.api_retry.error_status"] == 529
    assert event.attributes["ccotel.api_retry.attempt"] == 1
    assert m.value("ccotel_relay_api_retries", "529", "overloaded") == 1


def test_relay_counters_are_declared_in_metrics() -> None:
    """Every counter the relay and stream.py count is declared (Metrics.inc refuses the others)."""
    import ccotel.commands.relay
    import ccotel.sources.stream.assembler
    import ccotel.sources.stream.lines

    used = set()
    for module in (ccotel.commands.relay, ccotel.sources.stream.lines, ccotel.sources.stream.assembler):
        with open(module.__file__, encoding="utf-8") as f:
            used |= set(re.findall(r'"(ccotel_relay_[a-z_]+)"', f.read()))
    assert len(used) == 9
    assert sorted(n for n in used if n not in metrics.METRICS) == []


# -- bad input ---------------------------------------------------------------------------------


def test_malformed_and_truncated_lines_pass_through_and_are_counted(relay_metrics: Metrics) -> None:
    fx = load_fixture("2.1.330-s01_bash_tool")
    (_, good), = list(_streams(fx))
    lines = good.splitlines(keepends=True)
    data = (lines[0] + b'{"type":"assistant","message":{"id":\n' + lines[1] + b"\xff\xfe not utf8\n"
            + b"[1,2,3]\n" + b"\n" + b"".join(lines[2:]) + b'{"type":"result","subtype":"succ')
    m = Metrics()
    assembler = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)), counter_for(m))
    out, spans, result = _relay_bytes(data, assembler, counter_for(m), seed=3)
    assert out == data
    assert result.bad_lines == {"malformed_json": 1, "invalid_utf8": 1, "not_an_object": 1, "truncated": 1}
    for reason, n in result.bad_lines.items():
        assert m.value("ccotel_relay_bad_lines", reason) == n
    clean = []
    _relay_clean = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)))
    _o, clean, _r = _relay_bytes(good, _relay_clean)
    assert sorted(s.span_id for s in spans) == sorted(s.span_id for s in clean)  # the rest still traced


def test_over_long_line_is_passed_through_and_counted() -> None:
    data = b'{"type":"system","subtype":"init","session_id":"s"}\n' + b'{"x":"' + b"a" * 5000 + b'"}\n' + b"{}\n"
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    os.write(src_w, data)
    os.close(src_w)
    result = relay(src_r, dst_w, StreamAssembler(), lambda _s: None, lambda *_a: None, max_line_bytes=1000)
    os.close(dst_w)
    assert os.read(dst_r, 1 << 16) == data
    assert result.bad_lines == {"line_too_long": 1} and result.lines == 2


# -- cumulative content arrays ------------------------------------------------------------------


def _assistant(ctx: str | None, msg_id: str, content: list[dict[str, Any]], uuid: str) -> dict[str, Any]:
    return {"type": "assistant", "session_id": "sess-1", "uuid": uuid, "parent_tool_use_id": ctx,
            "request_id": f"req_{msg_id}", "message": {"id": msg_id, "model": "claude-x", "content": content,
                                                      "usage": {"input_tokens": 1, "output_tokens": 1}}}


def _tool(tid: str, name: str = "Bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": {}}


def _text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def _result(ctx: str | None, tid: str, uuid: str) -> dict[str, Any]:
    return {"type": "user", "session_id": "sess-1", "uuid": uuid, "parent_tool_use_id": ctx,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "ok"}]}}


def test_fingerprint_of_the_first_block() -> None:
    assert fingerprint(_tool("t1")) == "tool_use:t1"
    assert fingerprint(_text("x" * 100)) == "text:" + "x" * 64
    assert fingerprint({"type": "thinking", "thinking": "hmm"}) == "thinking:hmm"
    assert fingerprint({"type": "tool_result", "tool_use_id": "t9"}) == "tool_result:t9"


def test_dedupe_switch_reprocesses_and_never_drops(relay_metrics: Metrics) -> None:
    m = Metrics()
    d = BlockDedupe(counter_for(m))
    ctx = ("assistant", "")
    x = [_text("agent X says"), _tool("x1"), _tool("x2")]
    y = [_text("agent Y says"), _tool("y1"), _tool("y2"), _tool("y3")]
    assert d.new_blocks(ctx, "m", x) == x
    assert d.new_blocks(ctx, "m", x) == []  # the same array again: nothing new
    assert d.new_blocks(ctx, "m", y) == y  # a switch: Y from its start
    # X again, grown by one block at an index below Y's length: an index kept across the switch
    # (4) would skip x3; the reset processes the array again and drops only x's blocks seen before.
    assert d.new_blocks(ctx, "m", [*x, _tool("x3")]) == [_tool("x3")]
    assert d.new_blocks(ctx, "m", [*y, _tool("y4")]) == [_tool("y4")]
    assert m.value("ccotel_relay_context_switches") == 3
    assert m.value("ccotel_relay_repeated_blocks") == 3 + 4  # x's three, then y's four blocks again


def test_interleaved_cumulative_arrays_of_two_agents() -> None:
    """The main agent starts two subagents in one cumulative message; their cumulative arrays
    interleave on the stream, and a producer without distinct contexts (the last agent's records
    carry the same parent) alternates arrays: every tool call is traced once, none is lost."""
    sid = "sess-1"
    recs: list[dict[str, Any]] = [
        {"type": "system", "subtype": "init", "session_id": sid, "cwd": "/p", "claude_code_version": "9.9.9"},
        _assistant(None, "m1", [_text("Starting two helpers.")], "u1"),
        _assistant(None, "m1", [_text("Starting two helpers."), _tool("A", "Agent")], "u2"),
        {"type": "system", "subtype": "task_started", "session_id": sid, "task_id": "agentaaa", "tool_use_id": "A",
         "subagent_type": "general-purpose"},
        _assistant(None, "m1", [_text("Starting two helpers."), _tool("A", "Agent"), _tool("B", "Agent")], "u3"),
        {"type": "system", "subtype": "task_started", "session_id": sid, "task_id": "agentbbb", "tool_use_id": "B",
         "subagent_type": "general-purpose"},
        _assistant("A", "sa1", [_text("A works"), _tool("a1")], "ua1"),
        _assistant("B", "sb1", [_text("B works"), _tool("b1")], "ub1"),
        _assistant("A", "sa1", [_text("A works"), _tool("a1"), _tool("a2")], "ua2"),
        _assistant("B", "sb1", [_text("B works"), _tool("b1"), _tool("b2"), _tool("b3")], "ub2"),
        # the same context key for both arrays: switch, re-emit, a new block below the other's length
        _assistant("A", "sa1", [_text("A works"), _tool("a1"), _tool("a2"), _tool("a3")], "ua3"),
        _result("A", "a1", "ra1"), _result("B", "b1", "rb1"), _result("B", "b2", "rb2"), _result("B", "b3", "rb3"),
        _result("A", "a2", "ra2"), _result("A", "a3", "ra3"),
        {"type": "system", "subtype": "task_notification", "session_id": sid, "task_id": "agentbbb",
         "tool_use_id": "B", "status": "completed"},
        _result(None, "B", "rB"),
        {"type": "system", "subtype": "task_notification", "session_id": sid, "task_id": "agentaaa",
         "tool_use_id": "A", "status": "completed"},
        _result(None, "A", "rA"),
        _assistant(None, "m2", [_text("Both done.")], "u4"),
        {"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "num_turns": 2,
         "duration_ms": 10, "duration_api_ms": 5, "total_cost_usd": 0.5, "terminal_reason": "completed",
         "usage": {"input_tokens": 1, "output_tokens": 2}, "modelUsage": {}, "permission_denials": []},
    ]
    # Interleave B's cumulative array into A's context too (a producer that reuses the context).
    recs.insert(11, _assistant("A", "sb1", [_text("B works"), _tool("b1"), _tool("b2"), _tool("b3")], "ux"))
    a = StreamAssembler(lambda _sid, _uuid: "prompt-uuid")
    for i, rec in enumerate(recs):
        a.add(rec, 1_000 * (i + 1))
    a.finish(10**9)
    spans = a.drain()
    tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tools) == ["A", "B", "a1", "a2", "a3", "b1", "b2",
                                                                         "b3"]
    assert all(s.status is StatusCode.UNSET for s in tools)  # each got its result: none orphaned
    by_id = {s.span_id: s for s in spans}
    agents = {s.attributes["claude_code.agent_id"]: s for s in spans if s.name == "invoke_agent general-purpose"}
    assert set(agents) == {"agentaaa", "agentbbb"}
    for agent_id, tool in (("agentaaa", "A"), ("agentbbb", "B")):
        assert agents[agent_id].span_id == ids.span_id("agent", sid, agent_id)
        assert agents[agent_id].parent_span_id == ids.span_id("tool", sid, tool)
    for t in tools:  # every tool under its own call's chat span, every chat under its agent or the turn
        chat = by_id[t.parent_span_id or 0]
        assert chat.name == "chat claude-x"
    trace = ids.trace_id(sid, "prompt-uuid")
    assert {s.trace_id for s in spans} == {trace}
    chats = {s.attributes["gen_ai.response.id"]: s for s in spans if s.name == "chat claude-x"}
    assert set(chats) == {"m1", "m2", "sa1", "sb1"}
    assert chats["m1"].attributes["claude_code.message.lines"] == 3  # text, A, B: each block once


# -- the command: a wrapped process, signals, exit status ---------------------------------------


def _relay_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ccotel", "relay", "--traces-exporter", "none", "--root", "/nonexistent", *args]


def test_wrapped_command_exit_status_and_partial_lines_at_once(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        "import sys, time\n"
        "sys.stdout.buffer.write(b'{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"x\"}\\n{\"par')\n"
        "sys.stdout.flush()\n"
        "time.sleep(float(sys.argv[1]))\n"
        "sys.stdout.buffer.write(b'tial\": 1}\\n')\n"
        "sys.exit(3)\n")
    proc = subprocess.Popen(_relay_cmd("--", sys.executable, str(child), "1.5"), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = b""
    deadline = time.monotonic() + 10
    while not first.endswith(b'{"par') and time.monotonic() < deadline:
        first += os.read(proc.stdout.fileno(), 1 << 16)
    seen_at = time.monotonic()
    rest, err = proc.communicate(timeout=30)
    assert first + rest == b'{"type":"system","subtype":"init","session_id":"x"}\n{"partial": 1}\n'
    assert proc.returncode == 3, err
    assert time.monotonic() - seen_at > 1.0  # the partial line was out before the child went on


def test_sigterm_sigint_and_sighup_are_forwarded_to_the_command(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        "import signal, sys, time\n"
        "def bye(n, _f):\n"
        "    sys.stdout.write(f'got {n}\\n'); sys.stdout.flush(); sys.exit(40 + n)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "signal.signal(signal.SIGINT, bye)\n"
        "signal.signal(signal.SIGHUP, bye)\n"
        "print('ready', flush=True)\n"
        "for _ in range(300):\n"
        "    time.sleep(0.1)\n")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        proc = subprocess.Popen(_relay_cmd("--", sys.executable, str(child)), cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(sig)
        rest, err = proc.communicate(timeout=30)
        assert rest == f"got {int(sig)}\n".encode(), err
        assert proc.returncode == 40 + int(sig)


def test_command_killed_by_a_signal_gives_128_plus_n(tmp_path: Path) -> None:
    proc = subprocess.run(_relay_cmd("--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"),
                          cwd=REPO, capture_output=True, timeout=30)
    assert proc.returncode == 128 + 9


def test_stdin_mode_passes_a_fixture_stream_through(tmp_path: Path) -> None:
    fx = load_fixture("s03_parallel_subagents")
    (_, data), = list(_streams(fx))
    proc = subprocess.run([sys.executable, "-m", "ccotel", "relay", "--traces-exporter", "console", "--root",
                           str(fx.config_dir)], cwd=REPO, input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == data
    spans = [json.loads(ln) for ln in proc.stderr.splitlines() if ln.startswith(b"{")]
    by_id = {f"{s.span_id:016x}": s for s in _transcript_spans(fx)}
    assert len(spans) == 11
    for s in spans:  # the console exporter writes to stderr: stdout is the stream's
        assert by_id[s["span_id"]].trace_id == int(s["trace_id"], 16)


def test_spans_go_through_the_export_queue(relay_metrics: Metrics) -> None:
    fx = load_fixture("2.1.330-s03_parallel_subagents")
    (_, data), = list(_streams(fx))
    sink = MemorySink()
    sink.retry(times=1)  # the backend answers "later" once: the queue retries
    queue = ExportQueue(sink, min_backoff_s=0.01)
    assembler = StreamAssembler(TranscriptPrompts([str(fx.config_dir)], delays=(0.0,)))
    src_r, src_w = os.pipe()
    os.write(src_w, data)
    os.close(src_w)
    result = relay(src_r, None, assembler, lambda spans: queue.submit(spans, block_s=0.0), lambda *_a: None)
    assert queue.flush(timeout_s=10)
    queue.close()
    assert result.spans == len(sink.spans) == 11
    assert {s.span_id for s in sink.spans} <= {s.span_id for s in _transcript_spans(fx)}


def test_turn_span_waits_for_a_second_result_then_goes_out_on_tick() -> None:
    """A background agent's notification adds a round (and a result) to the turn: its span goes
    out once no result came for ``grace_ns``, without waiting for the end of the stream."""
    sid = "sess-2"
    a = StreamAssembler(lambda _sid, _uuid: "p1", grace_ns=1_000)
    res = {"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "num_turns": 1}
    a.add(_assistant(None, "m1", [_text("hi")], "u1") | {"session_id": sid}, 100)
    a.add(dict(res, num_turns=2), 200)
    a.tick(700)  # within the grace: nothing yet
    assert [s for s in a.drain() if s.parent_span_id is None] == []
    a.add(_assistant(None, "m2", [_text("the helper said")], "u2") | {"session_id": sid}, 800)
    a.add(res, 900)
    a.tick(1_500)
    assert [s for s in a.drain() if s.parent_span_id is None] == []
    a.tick(1_900)
    (turn,) = [s for s in a.drain() if s.parent_span_id is None]
    assert turn.span_id == ids.span_id("turn", sid, "p1") and turn.attributes["ccotel.result.count"] == 2
    assert turn.attributes["ccotel.result.num_turns"] == 1 and turn.attributes["claude_code.turn.api_calls"] == 2


def test_arguments_beside_cli_subcommands() -> None:
    """cli.py keeps the subcommand in args.command: the wrapped command must not overwrite it."""
    import argparse

    from ccotel.commands.relay import add_arguments

    parser = argparse.ArgumentParser(prog="ccotel")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("relay"))
    args = parser.parse_args(["relay", "--traces-exporter", "none", "--", "claude", "-p", "hi", "--verbose"])
    assert args.command == "relay" and args.relay_command == ["--", "claude", "-p", "hi", "--verbose"]
    assert parser.parse_args(["relay"]).relay_command == []


# -- bounds: memory, a closed stdout, signals in every phase (issue 27) --------------------------

_FLOOD = 'yes \'{"type":"x"}\''  # a producer that never stops
_AS_LIMIT = 2 << 30  # the relay's address space in these tests: a leak fails the test, not the machine


def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT, _AS_LIMIT))


def _vm_hwm_kb(pid: int) -> int:
    try:
        text_ = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    m = re.search(r"VmHWM:\s+(\d+) kB", text_)
    return int(m.group(1)) if m else 0


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                found = {int(x) for x in children.read_text().split()}
            except OSError:
                continue
            todo.extend(found - out)
            out |= found
    return out


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (SigCgt in /proc/<pid>/status)."""
    try:
        m = re.search(r"SigCgt:\s+([0-9a-f]+)", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return False
    return m is not None and bool(int(m.group(1), 16) >> (sig - 1) & 1)


def _wait_exit(proc: subprocess.Popen[bytes], limit_s: float) -> tuple[float, int]:
    """(seconds until ``proc`` exited, at most ``limit_s``; its peak RSS in kB meanwhile)."""
    t0 = time.monotonic()
    hwm = 0
    while proc.poll() is None and time.monotonic() - t0 < limit_s:
        hwm = max(hwm, _vm_hwm_kb(proc.pid))
        time.sleep(0.05)
    return time.monotonic() - t0, hwm


def _kill_all(proc: subprocess.Popen[bytes], pids: set[int]) -> None:
    for pid in (proc.pid, *pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=10)


def _gone(pids: set[int], within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_running(p) for p in pids)


def test_stdout_closing_ends_the_relay_and_its_command_with_bounded_memory(tmp_path: Path) -> None:
    """``ccotel relay -- sh -c 'yes ...' | head -2``: once head is gone the relay stops reading,
    ends the command and exits, its memory bounded (was: read on, 9.5 GB, never exited)."""
    from ccotel.commands.relay import KILL_GRACE_S, STOP_FLUSH_S

    with open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen(_relay_cmd("--", "sh", "-c", _FLOOD), cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                                preexec_fn=_limited)
    pids: set[int] = set()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == proc.stdout.readline() == b'{"type":"x"}\n'
        deadline = time.monotonic() + 5
        while len(pids) < 2 and time.monotonic() < deadline:  # sh, and yes (unless sh ran it in its place)
            pids |= _descendants(proc.pid)
            time.sleep(0.05)
        assert pids
        time.sleep(1.0)  # a backlog builds up meanwhile
        proc.stdout.close()  # head -2 exits
        took, hwm = _wait_exit(proc, 10.0)
        assert proc.poll() is not None, f"still running {took:.1f} s after its stdout closed, VmHWM {hwm} kB"
        assert took < KILL_GRACE_S + STOP_FLUSH_S + 0.5
        assert 0 < hwm < 300 * 1024, hwm
        assert _gone(pids), [p for p in pids if _running(p)]
    finally:
        _kill_all(proc, pids)


def test_sigterm_ends_a_flooding_command_that_ignores_it_within_the_grace(tmp_path: Path) -> None:
    """SIGTERM is passed on; a command that ignores it is killed after the grace, and the relay
    exits (was: the relay read on for good, the producer left running)."""
    from ccotel.commands.relay import KILL_GRACE_S, STOP_FLUSH_S


    with open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen(_relay_cmd("--", "sh", "-c", f"trap '' TERM INT; {_FLOOD}"), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=err, preexec_fn=_limited)
    pids: set[int] = set()
    drained = threading.Event()

    def drain() -> None:  # a reader that keeps up: the relay is never held up by its stdout
        assert proc.stdout is not None
        while os.read(proc.stdout.fileno(), 1 << 16):
            pass
        drained.set()

    try:
        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 5
        while len(pids) < 2 and time.monotonic() < deadline:
            pids |= _descendants(proc.pid)
            time.sleep(0.05)
        assert pids
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        took, hwm = _wait_exit(proc, 15.0)
        assert proc.poll() is not None, f"still running {took:.1f} s after SIGTERM"
        assert took < KILL_GRACE_S + 2 * STOP_FLUSH_S + 0.5
        assert hwm < 300 * 1024, hwm
        assert _gone(pids), [p for p in pids if _running(p)]
    finally:
        _kill_all(proc, pids)


def test_sigterm_during_a_large_saved_stream_ends_the_relay_at_once(tmp_path: Path) -> None:
    """stdin mode, a saved stream far larger than the relay may hold: SIGTERM ends it within the
    stop grace, in whatever phase (was: 26 s building a backlog, then "not all built")."""
    from ccotel.commands.relay import STOP_FLUSH_S

    fx = load_fixture("2.1.330-s03_parallel_subagents")
    (_, data), = list(_streams(fx))
    saved = tmp_path / "stream.jsonl"
    with open(saved, "wb") as f:
        for _ in range(max(1, (150 << 20) // len(data))):
            f.write(data)
    with open(saved, "rb") as stdin, open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "ccotel", "relay", "--traces-exporter", "none", "--root",
                                 str(fx.config_dir)], cwd=REPO, stdin=stdin, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=_limited)
    try:
        deadline = time.monotonic() + 30
        while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _catches(proc.pid, signal.SIGTERM)  # relaying: its handlers are set
        time.sleep(0.5)  # the stream is read far faster than it is parsed (stdout is /dev/null)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        took, hwm = _wait_exit(proc, 30.0)
        assert proc.poll() is not None and took < 2 * STOP_FLUSH_S + 0.5, (took, hwm)
        assert proc.returncode == 128 + signal.SIGTERM
        assert hwm < 300 * 1024, hwm
    finally:
        _kill_all(proc, set())
    saved.unlink()
