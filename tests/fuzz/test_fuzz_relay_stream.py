"""The relay's stream (``ccotel relay``: Claude Code's stream-json on stdout) as an input surface:
random lines (garbage bytes, invalid UTF-8, huge, deeply nested, records of the right shape with
wrong types anywhere) through the relay's line handling (commands/relay.py ``_Processor.handle``:
parse_record, then sources/stream's StreamAssembler) never raise: each line is counted (bad ones by
reason), and every span it builds encodes as OTLP. The crashes found are kept as explicit examples."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ccotel.commands.relay import _Line, _Processor
from ccotel.export.otlp import encode_span
from ccotel.sources.stream.assembler import StreamAssembler
from ccotel.sources.stream.lines import BAD_LINE_REASONS

SETTINGS: dict[str, Any] = dict(deadline=None, derandomize=True, database=None, max_examples=200,
                                phases=[Phase.explicit, Phase.generate],
                                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_scalar = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
_any = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=8)
_ids = st.sampled_from(["toolu_1", "toolu_2", "msg_1", "msg_2", "u1", "u2", "", "s1"]) | _any


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return value | _any


_block = st.fixed_dictionaries({"type": _maybe(st.sampled_from(["text", "thinking", "tool_use", "tool_result"]))},
                               optional={"id": _maybe(_ids), "name": _maybe(st.sampled_from(["Bash", "Task", "Agent"])),
                                         "input": _any, "tool_use_id": _maybe(_ids), "text": _any,
                                         "content": _any, "is_error": _any})
_usage = st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens",
                                          "cache_creation_input_tokens"]), _maybe(st.integers(0, 10**6)), max_size=4)
_message = st.fixed_dictionaries({}, optional={
    "id": _maybe(_ids), "model": _maybe(st.sampled_from(["claude-opus-4-1", "claude-haiku"])), "role": _any,
    "content": _maybe(st.lists(_block | _any, max_size=4)) | st.text(max_size=10), "usage": _maybe(_usage),
    "stop_reason": _any})
_record = st.fixed_dictionaries(
    {"type": _maybe(st.sampled_from(["assistant", "user", "system", "result", "stream_event"]))},
    optional={"message": _maybe(_message), "session_id": _maybe(_ids), "uuid": _maybe(_ids),
              "parent_tool_use_id": _maybe(_ids), "subtype": _maybe(st.sampled_from(
                  ["init", "api_retry", "task_started", "task_notification", "success", "error_max_turns"])),
              "tool_use_id": _maybe(_ids), "task_id": _maybe(_ids), "model": _any, "cwd": _any, "version": _any,
              "usage": _maybe(_usage), "modelUsage": _maybe(st.dictionaries(st.text(max_size=8), _usage, max_size=2)),
              "total_cost_usd": _any, "duration_ms": _any, "is_error": _any, "result": _any,
              "attempt": _any, "retry_delay_ms": _any, "error_status": _any, "tool_use_result": _any})


def _dumps(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):  # an int past 64 bits, a NaN key: as Python writes it
        return json.dumps(doc).encode()


_line = st.one_of(
    _record.map(_dumps),
    _record.map(_dumps),
    _any.map(_dumps),
    st.binary(max_size=200),
    st.sampled_from([b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000, b"\xff\xfe garbage",
                     b'{"type": "assistant", "message": {"content": [' + b'{"type": "text", "text": "x"},' * 20000
                     + b'{"type": "text", "text": "y"}]}}']),
)


class _Counts:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, tuple[str, ...]], float] = {}

    def __call__(self, name: str, labels: tuple[str, ...], value: float) -> None:
        key = (name, labels)
        self.counts[key] = self.counts.get(key, 0.0) + value


def _run(lines: list[bytes], terminated_last: bool = True) -> None:
    counts = _Counts()
    spans: list[Any] = []
    clock = [1_700_000_000_000_000_000]
    proc = _Processor(StreamAssembler(count=counts, grace_ns=1_000), spans.extend, counts, lambda: clock[0])
    for i, data in enumerate(lines):
        clock[0] += 1_000_000
        proc.handle(_Line(data, clock[0], terminated_last or i < len(lines) - 1))  # what _loop runs, unguarded
        proc.assembler.tick(clock[0])
        proc._flush()
    proc.assembler.finish(clock[0] + 10**10)
    proc._flush()
    assert proc.lines == len(lines)
    assert set(proc.bad) <= set(BAD_LINE_REASONS)
    assert counts.counts.get(("ccotel_relay_lines", ()), 0.0) == len(lines)
    for span in spans:
        encode_span(span)


@settings(**SETTINGS)
@given(lines=st.lists(_line, max_size=25), terminated_last=st.booleans())
@example(lines=[b'{"type": "assistant", "message": {"id": "m", "content": [{"type": "tool_use", "id": 5}]}}'],
         terminated_last=True)
def test_any_stream_lines_are_counted_and_never_raise(lines: list[bytes], terminated_last: bool) -> None:
    _run(lines, terminated_last)


def test_bad_lines_are_counted_by_reason() -> None:
    counts = _Counts()
    proc = _Processor(StreamAssembler(count=counts), lambda _s: None, counts, lambda: 0)
    for data, terminated in ((b"\xff\xfe garbage", True), (b"{not json", True), (b"[1, 2]", True),
                             (b'{"type": "x"', False), (b"   ", True)):
        proc.handle(_Line(data, 0, terminated))
    assert proc.bad == {"invalid_utf8": 1, "malformed_json": 1, "not_an_object": 1, "truncated": 1}
    assert proc.lines == 5
