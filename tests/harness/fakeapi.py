"""A scripted fake of the Anthropic Messages API on 127.0.0.1.

The server answers ``POST /v1/messages`` (SSE when ``stream`` is true, a JSON message otherwise),
``POST /v1/messages/count_tokens`` and, for anything else, a 404 JSON error.

A scenario is data: a list of :class:`Rule`. A request is matched against the rules in order;
the first rule whose conditions hold (and which is not used up) decides the response:

* ``first_user``: substring of the conversation's first user text. The first user message's text
  blocks are joined, ignoring ``<system-reminder>`` blocks that Claude Code injects. Subagent
  conversations are recognised the same way (their first user text is the Task/Agent prompt).
* ``turns``: how many assistant messages the request already contains (``None``: any).
* ``times``: how often the rule may be used (``None``: unlimited). Used for "529 then success".
* ``last_user`` (optional): substring of the last user message's text; tells the compaction
  request (same first user text and turn count as a normal request) apart.

Requests that match no rule (side calls such as title generation) get a short default text
answer and are logged with ``"matched": false``.

Every response sent is appended to a ground-truth JSONL file (see :meth:`FakeAPI._log`). That file,
not ccotel's parser, is what tests compare the transcripts against.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "Usage",
    "Message",
    "ApiError",
    "Rule",
    "FakeAPI",
    "text",
    "thinking",
    "tool",
    "server_tool_use",
    "advisor_result",
    "advisor_iteration",
    "first_user_text",
    "count_assistant_turns",
    "build_message",
    "sse_events",
    "encode_sse",
    "parse_sse",
    "error_body",
]

DEFAULT_MODEL = "claude-sonnet-4-5-20250929"
#: An ``advisor_message`` iteration whose model is this string gets the model of the request's
#: ``advisor`` tool (the CLI picks it from the advisorModel setting); DEFAULT_ADVISOR_MODEL without one.
ADVISOR_PLACEHOLDER = "{advisor}"
DEFAULT_ADVISOR_MODEL = "claude-opus-4-8"


@dataclass(frozen=True)
class Usage:
    """Token usage reported for one response (pick distinct, non-round numbers).

    ``iterations`` (optional) is sent as ``usage.iterations``: the API's per-sampling breakdown of a
    response that used a server tool. An ``advisor_message`` entry (see :func:`advisor_iteration`)
    is a call to the advisor model, with its own ``model`` and tokens, billed and NOT part of the
    four top-level counts; ``message`` entries are the executor's own samplings.
    """

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    iterations: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, int]:
        """The four top-level counts (what the ground truth's ``usage`` holds)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


def _iteration(kind: str, input_tokens: int, output_tokens: int, cache_creation_input_tokens: int,
               cache_read_input_tokens: int, model: str | None = None) -> dict[str, Any]:
    it: dict[str, Any] = {"type": kind}
    if model is not None:
        it["model"] = model
    it.update(input_tokens=input_tokens, output_tokens=output_tokens,
              cache_creation_input_tokens=cache_creation_input_tokens,
              cache_read_input_tokens=cache_read_input_tokens,
              cache_creation={"ephemeral_5m_input_tokens": cache_creation_input_tokens,
                              "ephemeral_1h_input_tokens": 0})
    return it


def advisor_iteration(model: str, input_tokens: int, output_tokens: int, cache_creation_input_tokens: int = 0,
                      cache_read_input_tokens: int = 0) -> dict[str, Any]:
    """A ``usage.iterations`` entry of type ``advisor_message``: one advisor-model call."""
    return _iteration("advisor_message", input_tokens, output_tokens, cache_creation_input_tokens,
                      cache_read_input_tokens, model)


def message_iteration(input_tokens: int, output_tokens: int, cache_creation_input_tokens: int = 0,
                      cache_read_input_tokens: int = 0) -> dict[str, Any]:
    """A ``usage.iterations`` entry of type ``message``: one sampling of the executor model."""
    return _iteration("message", input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens)


def text(s: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": s}


def thinking(s: str, signature: str = "c2lnbmF0dXJlLWZvci10ZXN0cw==") -> dict[str, Any]:
    """A thinking content block (streamed as thinking_delta + signature_delta)."""
    return {"type": "thinking", "thinking": s, "signature": signature}


def tool(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool_use content block. ``id`` defaults to a unique ``toolu_<scenario>_<n>_<i>``."""
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


def server_tool_use(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> dict[str, Any]:
    """A ``server_tool_use`` block (a tool the API runs itself, e.g. ``advisor``).
    ``id`` defaults to a unique ``srvtoolu_<scenario>_<n>_<i>``."""
    block: dict[str, Any] = {"type": "server_tool_use", "name": name, "input": dict(input or {})}
    if id is not None:
        block["id"] = id
    return block


def advisor_result(advice: str, tool_use_id: str | None = None) -> dict[str, Any]:
    """An ``advisor_tool_result`` block (``content: {type: advisor_result, text}``), answering the
    ``server_tool_use`` before it unless ``tool_use_id`` is given."""
    block: dict[str, Any] = {"type": "advisor_tool_result", "content": {"type": "advisor_result", "text": advice}}
    if tool_use_id is not None:
        block["tool_use_id"] = tool_use_id
    return block


@dataclass(frozen=True)
class Message:
    """A successful response: content blocks, usage, optional stop_reason and model."""

    blocks: tuple[dict[str, Any], ...]
    usage: Usage
    stop_reason: str | None = None  # default: tool_use if any tool block, else end_turn
    model: str | None = None  # default: the requested model

    def __init__(self, blocks, usage: Usage, stop_reason: str | None = None, model: str | None = None):
        object.__setattr__(self, "blocks", tuple(blocks))
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "stop_reason", stop_reason)
        object.__setattr__(self, "model", model)


@dataclass(frozen=True)
class ApiError:
    """An HTTP error response with the real error JSON shape."""

    status: int
    error_type: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Rule:
    """Which response to send for which request (first matching, not used-up rule wins)."""

    name: str
    reply: Message | ApiError
    first_user: str | None = None
    turns: int | None = None
    times: int | None = None
    delay: float = 0.0  # seconds to wait before answering
    in_transcript: bool = True  # False: the scenario expects the CLI to abort before recording it
    last_user: str | None = None  # substring of the last user message's text (e.g. the compaction prompt)
    used: int = field(default=0, compare=False)

    def matches(self, first_user: str, turns: int, last_user: str = "") -> bool:
        if self.times is not None and self.used >= self.times:
            return False
        if self.first_user is not None and self.first_user not in first_user:
            return False
        if self.last_user is not None and self.last_user not in last_user:
            return False
        if self.turns is not None and self.turns != turns:
            return False
        return True


# --------------------------------------------------------------------------- request parsing

_REMINDER = re.compile(r"^\s*<system-reminder>.*?</system-reminder>\s*", re.S)


def _strip_reminders(s: str) -> str:
    prev = None
    while prev != s:
        prev = s
        s = _REMINDER.sub("", s, count=1)
    return s


def _user_text(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, str):
        return _strip_reminders(content).strip()
    parts = []
    for b in content or []:
        if isinstance(b, dict) and b.get("type") == "text":
            t = _strip_reminders(b.get("text") or "")
            if t.strip():
                parts.append(t.strip())
    return "\n".join(parts)


def last_user_text(body: dict[str, Any]) -> str:
    """Text blocks of the last user message (tool_result blocks are not text), without reminders."""
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            return _user_text(m)
    return ""


def first_user_text(body: dict[str, Any]) -> str:
    """Text of the first user message, without the ``<system-reminder>`` blocks."""
    for m in body.get("messages") or []:
        if m.get("role") != "user":
            continue
        return _user_text(m)
    return ""


def count_assistant_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")


# --------------------------------------------------------------------------- response building


def build_message(msg_id: str, model: str, blocks: list[dict[str, Any]], stop_reason: str,
                  usage: Usage) -> dict[str, Any]:
    """The final message object (what a non-streaming request gets)."""
    u = usage.as_dict()
    # The real API breaks cache creation down by TTL; readers such as ccusage prefer this object.
    u["cache_creation"] = {"ephemeral_5m_input_tokens": usage.cache_creation_input_tokens,
                           "ephemeral_1h_input_tokens": 0}
    u["service_tier"] = "standard"
    if usage.iterations:
        u["iterations"] = [dict(it) for it in usage.iterations]
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": u,
    }


def _chunks(s: str, n: int) -> list[str]:
    if not s:
        return []
    return [s[i:i + n] for i in range(0, len(s), n)]


def sse_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) sequence the real API streams for ``message``.

    message_start carries the input/cache usage and ``output_tokens: 1`` (a start-of-stream
    snapshot, as the real API does); message_delta carries the final usage.
    """
    usage = message["usage"]
    start_usage = dict(usage)
    start_usage["output_tokens"] = 1
    start = dict(message, content=[], stop_reason=None, stop_sequence=None, usage=start_usage)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for c in _chunks(block["text"], 40):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": c}}))
        elif kind == "thinking":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "thinking", "thinking": "",
                                                                     "signature": ""}}))
            for c in _chunks(block["thinking"], 40):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "thinking_delta", "thinking": c}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "signature_delta",
                                                             "signature": block["signature"]}}))
        elif kind == "tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "tool_use", "id": block["id"],
                                                                     "name": block["name"], "input": {}}}))
            js = json.dumps(block["input"], separators=(",", ":"))
            for c in [""] + _chunks(js, 25):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta", "partial_json": c}}))
        elif kind == "server_tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "server_tool_use", "id": block["id"],
                                                                     "name": block["name"], "input": {}}}))
            js = json.dumps(block["input"], separators=(",", ":"))
            for c in [""] + (_chunks(js, 25) if block["input"] else []):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta", "partial_json": c}}))
        elif kind == "advisor_tool_result":  # sent whole in content_block_start, as server tool results are
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": block}))
        else:  # pragma: no cover - scenario error
            raise ValueError(f"unsupported block type {kind!r}")
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta_usage = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                         "cache_read_input_tokens", "output_tokens")}
    if "iterations" in usage:  # the final breakdown comes with the final counts
        delta_usage["iterations"] = usage["iterations"]
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                     "usage": delta_usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    out = []
    for name, data in events:
        out.append(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n")
    return "".join(out).encode()


def parse_sse(raw: bytes | str) -> list[tuple[str, dict[str, Any]]]:
    """Parse an SSE byte stream back into (event, data) pairs (used by the unit tests)."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    events = []
    for chunk in raw.split("\n\n"):
        if not chunk.strip():
            continue
        name, data = None, []
        for line in chunk.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].strip())
        events.append((name, json.loads("\n".join(data))))
    return events


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


# --------------------------------------------------------------------------- the server


class FakeAPI:
    """The scripted server. Use as a context manager; ``base_url`` is for ANTHROPIC_BASE_URL.

    Args:
        scenario: short name used in message/request ids (``msg_<scenario>_<n>``).
        rules: the scenario's rules, in priority order.
        ground_truth: JSONL file to append one record per response to.
        request_log: optional JSONL file receiving every full request (headers + body), for debugging.
        default_model: model echoed when a rule does not pick one and the request has none.
    """

    def __init__(self, scenario: str, rules: list[Rule], ground_truth: Path | str,
                 request_log: Path | str | None = None):
        self.scenario = scenario
        self.rules = rules
        self.ground_truth = Path(ground_truth)
        self.request_log = Path(request_log) if request_log else None
        self._lock = threading.Lock()
        self._seq = 0
        self.records: list[dict[str, Any]] = []
        self.decided: list[str | None] = []  # rule names in decision order (None: unmatched)
        self._server: _QuietServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> FakeAPI:
        handler = _make_handler(self)
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"fakeapi-{self.scenario}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- decisions
    def _next_ids(self) -> tuple[int, str, str]:
        self._seq += 1
        n = self._seq
        return n, f"msg_{self.scenario}_{n:03d}", f"req_{self.scenario}_{n:03d}"

    def decide(self, body: dict[str, Any]) -> tuple[Rule | None, int, str, str, str, int]:
        """Pick the rule for a request; returns (rule, seq, msg_id, req_id, first_user, turns)."""
        fu = first_user_text(body)
        lu = last_user_text(body)
        turns = count_assistant_turns(body)
        with self._lock:
            rule = next((r for r in self.rules if r.matches(fu, turns, lu)), None)
            if rule is not None:
                rule.used += 1
            self.decided.append(rule.name if rule else None)
            seq, msg_id, req_id = self._next_ids()
        return rule, seq, msg_id, req_id, fu, turns

    def _log(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            self.ground_truth.parent.mkdir(parents=True, exist_ok=True)
            with self.ground_truth.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def log_request(self, path: str, headers: dict[str, str], body: Any) -> None:
        if self.request_log is None:
            return
        with self._lock:
            with self.request_log.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"time": _now(), "path": path, "headers": headers, "body": body}) + "\n")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _request_summary(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    tools = body.get("tools") or []
    system = body.get("system")
    if isinstance(system, list):
        system_len = sum(len(b.get("text") or "") for b in system if isinstance(b, dict))
    else:
        system_len = len(system or "")
    advisor = next((t.get("model") for t in tools if isinstance(t, dict) and t.get("name") == "advisor"), None)
    return {
        "model": body.get("model"),
        "advisor_model": advisor,
        "stream": bool(body.get("stream")),
        "max_tokens": body.get("max_tokens"),
        "messages": len(body.get("messages") or []),
        "tools": [t.get("name") for t in tools if isinstance(t, dict)],
        "thinking": body.get("thinking"),
        "system_chars": system_len,
        "anthropic_beta": headers.get("anthropic-beta"),
    }


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The CLI drops keep-alive connections at exit; that is not an error worth printing.
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _make_handler(api: FakeAPI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fakeapi/1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(body)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _read_body(self) -> Any:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return None

        def do_GET(self) -> None:
            self._not_found()

        def do_HEAD(self) -> None:
            self._not_found()

        def _not_found(self) -> None:
            body = error_body("not_found_error", f"Not found: {self.path}", "req_notfound")
            self._send(404, json.dumps(body).encode(), "application/json", {})

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            body = self._read_body()
            headers = {k.lower(): v for k, v in self.headers.items()}
            api.log_request(self.path, {k: v for k, v in headers.items() if k not in ("x-api-key", "authorization")},
                            body)
            if path == "/v1/messages/count_tokens" and isinstance(body, dict):
                self._count_tokens(body)
            elif path == "/v1/messages" and isinstance(body, dict):
                self._messages(body, headers)
            else:
                self._not_found()

        def _count_tokens(self, body: dict[str, Any]) -> None:
            n = 1000 + len(json.dumps(body)) // 4
            with api._lock:
                api._seq += 1
                seq = api._seq
            req_id = f"req_{api.scenario}_{seq:03d}"
            api._log({"seq": seq, "time": _now(), "endpoint": "count_tokens", "matched": False, "rule": None,
                      "status": 200, "request_id": req_id, "input_tokens": n})
            self._send(200, json.dumps({"input_tokens": n}).encode(), "application/json", {"request-id": req_id})

        def _messages(self, body: dict[str, Any], headers: dict[str, str]) -> None:
            rule, seq, msg_id, req_id, fu, turns = api.decide(body)
            stream = bool(body.get("stream"))
            # The record is written when the response is decided, before any scripted delay, so a
            # response the client aborts during the delay is still in the ground truth.
            record: dict[str, Any] = {
                "seq": seq,
                "time": _now(),
                "endpoint": "messages",
                "matched": rule is not None,
                "rule": rule.name if rule else None,
                "conversation": fu[:200],
                "assistant_turns_in_request": turns,
                "stream": stream,
                "delay_s": rule.delay if rule else 0.0,
                "expect_in_transcript": rule.in_transcript if rule else True,
                "request": _request_summary(body, headers),
            }
            reply = rule.reply if rule is not None else Message(
                [text("OK.")], Usage(input_tokens=23, output_tokens=3))
            if isinstance(reply, ApiError):
                eb = error_body(reply.error_type, reply.message, req_id)
                record.update(status=reply.status, message_id=None, request_id=req_id, model=None,
                              stop_reason=None, usage=None, blocks=[], error={"type": reply.error_type,
                                                                              "message": reply.message})
                api._log(record)
                self._delay(rule)
                self._send(reply.status, json.dumps(eb).encode(), "application/json",
                           {"request-id": req_id, **dict(reply.headers)})
                return
            model = reply.model or body.get("model") or DEFAULT_MODEL
            blocks = []
            last_server_id = None
            for i, b in enumerate(reply.blocks):
                b = dict(b)
                if b["type"] == "tool_use" and "id" not in b:
                    b["id"] = f"toolu_{api.scenario}_{seq:03d}_{i}"
                if b["type"] == "server_tool_use":
                    b.setdefault("id", f"srvtoolu_{api.scenario}_{seq:03d}_{i}")
                    last_server_id = b["id"]
                if b["type"] == "advisor_tool_result" and "tool_use_id" not in b:
                    b["tool_use_id"] = last_server_id
                blocks.append(b)
            has_tool = any(b["type"] == "tool_use" for b in blocks)
            stop = reply.stop_reason or ("tool_use" if has_tool else "end_turn")
            usage = reply.usage
            if any(it.get("model") == ADVISOR_PLACEHOLDER for it in usage.iterations):
                advisor = record["request"].get("advisor_model") or DEFAULT_ADVISOR_MODEL
                usage = replace(usage, iterations=tuple(dict(it, model=advisor)
                                                        if it.get("model") == ADVISOR_PLACEHOLDER
                                                        else it for it in usage.iterations))
            message = build_message(msg_id, model, blocks, stop, usage)
            record.update(status=200, message_id=msg_id, request_id=req_id, model=model, stop_reason=stop,
                          requested_model=body.get("model"),
                          usage=reply.usage.as_dict(),
                          # every billed sampling of the call: the executor's and any advisor's
                          iterations=[dict(it) for it in usage.iterations],
                          blocks=[{k: v for k, v in (("type", b["type"]), ("id", b.get("id")),
                                                     ("name", b.get("name"))) if v is not None} for b in blocks])
            api._log(record)
            self._delay(rule)
            if stream:
                self._send(200, encode_sse(sse_events(message)), "text/event-stream; charset=utf-8",
                           {"request-id": req_id, "cache-control": "no-cache"})
            else:
                self._send(200, json.dumps(message).encode(), "application/json", {"request-id": req_id})

        def _delay(self, rule: Rule | None) -> None:
            if rule is not None and rule.delay:
                time.sleep(rule.delay)

    return Handler
