"""Unit tests of the scripted fake Anthropic API: SSE framing, parsed back and reassembled."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from tests.harness.fakeapi import (
    ApiError,
    FakeAPI,
    Message,
    Rule,
    Usage,
    build_message,
    count_assistant_turns,
    encode_sse,
    first_user_text,
    last_user_text,
    parse_sse,
    sse_events,
    text,
    thinking,
    tool,
)

U = Usage(input_tokens=1234, output_tokens=37, cache_creation_input_tokens=91, cache_read_input_tokens=5678)


def reassemble(events: list[tuple[str, dict]]) -> dict:
    """What an SDK client rebuilds from the stream (the inverse of sse_events)."""
    msg = None
    partial: dict[int, str] = {}
    for name, data in events:
        assert name == data["type"]
        if name == "message_start":
            msg = json.loads(json.dumps(data["message"]))
        elif name == "content_block_start":
            assert data["index"] == len(msg["content"])
            msg["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = msg["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
            else:
                raise AssertionError(delta)
        elif name == "content_block_stop":
            if data["index"] in partial:
                msg["content"][data["index"]]["input"] = json.loads(partial.pop(data["index"]))
        elif name == "message_delta":
            msg["stop_reason"] = data["delta"]["stop_reason"]
            msg["stop_sequence"] = data["delta"]["stop_sequence"]
            msg["usage"].update(data["usage"])
        elif name in ("ping", "message_stop"):
            pass
        else:
            raise AssertionError(name)
    assert events[-1][0] == "message_stop"
    return msg


def test_sse_roundtrip_all_block_types() -> None:
    blocks = [thinking("Let me think " * 10, signature="sig=="), text("Hello there, " * 9),
              {**tool("Bash", {"command": "echo 'a \"quoted\" ü'", "description": "x"}), "id": "toolu_x_1"}]
    msg = build_message("msg_t_001", "claude-test", blocks, "tool_use", U)
    events = parse_sse(encode_sse(sse_events(msg)))
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 3
    start_usage = events[0][1]["message"]["usage"]
    assert start_usage["output_tokens"] == 1 and start_usage["cache_read_input_tokens"] == 5678
    assert start_usage["cache_creation"] == {"ephemeral_5m_input_tokens": 91, "ephemeral_1h_input_tokens": 0}
    assert events[0][1]["message"]["content"] == [] and events[0][1]["message"]["stop_reason"] is None
    assert reassemble(events) == msg
    delta_types = {d["delta"]["type"] for n, d in events if n == "content_block_delta"}
    assert delta_types == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}


def test_sse_wire_format() -> None:
    raw = encode_sse(sse_events(build_message("msg_1", "m", [text("hi")], "end_turn", U))).decode()
    assert raw.startswith("event: message_start\ndata: {")
    assert raw.endswith("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
    for chunk in raw.strip().split("\n\n"):
        lines = chunk.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: ")


def test_request_recognition() -> None:
    body = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>\nctx\n</system-reminder>\n\n"},
                                     {"type": "text", "text": "S99 hello"}]},
        {"role": "system", "content": "mid-conversation system text"},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "out"},
                                     {"type": "text", "text": "please summarise"}]},
    ]}
    assert first_user_text(body) == "S99 hello"
    assert last_user_text(body) == "please summarise"
    assert count_assistant_turns(body) == 1
    assert first_user_text({"messages": [{"role": "user", "content": "<system-reminder>a</system-reminder>plain"}]}) \
        == "plain"


def _post(api: FakeAPI, path: str, body: dict | None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("POST", path, body=json.dumps(body) if body is not None else b"",
                 headers={"content-type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    headers = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return resp.status, headers, data


def _req(first: str, turns: int = 0, stream: bool = True) -> dict:
    msgs = [{"role": "user", "content": first}]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": [{"type": "text", "text": str(i)}]},
                 {"role": "user", "content": "more"}]
    return {"model": "claude-test", "max_tokens": 10, "stream": stream, "messages": msgs}


def test_server_rules_errors_and_ground_truth(tmp_path: Path) -> None:
    gt = tmp_path / "gt.jsonl"
    rules = [
        Rule("busy", ApiError(529, "overloaded_error", "Overloaded"), first_user="K1", times=1),
        Rule("tool", Message([tool("Bash", {"command": "echo hi"})], U), first_user="K1", turns=0),
        Rule("final", Message([text("done")], Usage(11, 7, 3, 5)), first_user="K1", turns=1),
        Rule("bad", ApiError(400, "invalid_request_error", "nope"), first_user="K2"),
    ]
    with FakeAPI("tt", rules, gt) as api:
        st, h, data = _post(api, "/v1/messages?beta=true", _req("<system-reminder>x</system-reminder>K1 go"))
        assert st == 529 and h["request-id"] == "req_tt_001"
        assert json.loads(data) == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                                    "request_id": "req_tt_001"}
        st, h, data = _post(api, "/v1/messages?beta=true", _req("K1 go"))
        assert st == 200 and h["content-type"].startswith("text/event-stream") and h["request-id"] == "req_tt_002"
        msg = reassemble(parse_sse(data))
        assert msg["id"] == "msg_tt_002" and msg["stop_reason"] == "tool_use"
        assert msg["content"][0] == {"type": "tool_use", "id": "toolu_tt_002_0", "name": "Bash",
                                     "input": {"command": "echo hi"}}
        st, h, data = _post(api, "/v1/messages", _req("K1 go", turns=1, stream=False))
        body = json.loads(data)
        assert st == 200 and body["id"] == "msg_tt_003" and body["stop_reason"] == "end_turn"
        assert body["usage"]["output_tokens"] == 7 and body["content"] == [{"type": "text", "text": "done"}]
        st, _, data = _post(api, "/v1/messages", _req("K2"))
        assert st == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
        st, _, data = _post(api, "/v1/messages", _req("title for: something"))
        assert st == 200 and reassemble(parse_sse(data))["content"] == [{"type": "text", "text": "OK."}]
        st, _, data = _post(api, "/v1/messages/count_tokens?beta=true", _req("K1"))
        assert st == 200 and json.loads(data)["input_tokens"] > 0
        st, _, data = _post(api, "/v1/other", {})
        assert st == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    recs = [json.loads(line) for line in gt.read_text().splitlines()]
    msgs = [r for r in recs if r["endpoint"] == "messages"]
    assert [(r["rule"], r["status"], r["matched"]) for r in msgs] == [
        ("busy", 529, True), ("tool", 200, True), ("final", 200, True), ("bad", 400, True), (None, 200, False)]
    tool_rec = msgs[1]
    assert tool_rec["usage"] == {"input_tokens": 1234, "output_tokens": 37, "cache_creation_input_tokens": 91,
                                 "cache_read_input_tokens": 5678}
    assert tool_rec["blocks"] == [{"type": "tool_use", "id": "toolu_tt_002_0", "name": "Bash"}]
    assert tool_rec["conversation"] == "K1 go" and tool_rec["assistant_turns_in_request"] == 0
    assert tool_rec["message_id"] == "msg_tt_002" and tool_rec["request_id"] == "req_tt_002"
    assert tool_rec["model"] == "claude-test" and tool_rec["stop_reason"] == "tool_use"
    assert msgs[2]["stream"] is False and msgs[2]["assistant_turns_in_request"] == 1
    assert len({r["seq"] for r in recs}) == len(recs)
    assert len({r["message_id"] for r in msgs if r["message_id"]}) == 3


@pytest.mark.parametrize("n", [0, 1, 5])
def test_chunked_tool_input_roundtrip(n: int) -> None:
    inp = {"command": "x" * (n * 37), "nested": {"a": [1, 2, {"b": None}]}}
    msg = build_message("m", "x", [{**tool("T", inp), "id": "t1"}], "tool_use", U)
    assert reassemble(parse_sse(encode_sse(sse_events(msg))))["content"][0]["input"] == inp
