"""parse.py's typed fast path (msgspec) equals its checked path (orjson + to_entry), line for line.

The checked path is the reference: for every line the fast path takes, the entries and errors
must be identical; any other line must step aside to the checked path."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read import parse, parse_fast, parse_full
from ccotel.read.parse import parse_line
from ccotel.records import BadInput

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def real_lines() -> list[bytes]:
    paths = sorted(REALDATA.rglob("*.jsonl")) + sorted(FIXTURES.rglob("*.jsonl"))
    return [line for p in paths for line in p.read_bytes().split(b"\n") if line.strip()]


def assert_same(data: bytes) -> bool:
    """Equal results in both content modes; True if the fast path took the line."""
    took = False
    for capture in (False, True):
        fast, checked = parse_line(data, 11, capture), parse_line(data, 11, capture, fast=False)
        assert fast.errors == checked.errors, data[:300]
        assert [vars(e) for e in fast.entries] == [vars(e) for e in checked.entries], data[:300]
        took = took or parse_fast._fast_entry(data, 11, capture) is not None
    return took


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    found = real_lines()
    if len(found) < 1000:
        pytest.fail(f"only {len(found)} real lines under {REALDATA} and {FIXTURES}")
    return found


def test_real_lines_equal_and_nearly_all_fast(lines):
    fast = sum(assert_same(line) for line in lines)
    assert fast >= 0.95 * len(lines), f"fast path took {fast} of {len(lines)} lines"


ODD = [None, True, False, 0, 1, -1, 1.0, 2.5, 2 ** 63 - 1, "", "x", "2025-06-01T00:00:00.000Z", [], {}, [1, "a"],
       {"a": 1}, [{"type": "text"}], [{"type": "text", "text": 5}], [None], {"text": "t"}, [{"text": "t"}]]
RAW_ODD = [b"18446744073709551616", b"9223372036854775808", b"1e2", b'"\\ud800"', b'"\\u0000"', b"-0", b"1E400",
           b'"\xff"', b'"\xed\xa0\x80"', b'"\xc0\x80"', b'"\\q"', b"01", b'"\x01"']


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, prefix + (i,))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()
_MARK = "@@raw@@"


def mutate(line: bytes, rng: random.Random) -> bytes:
    obj = orjson.loads(line)
    if not isinstance(obj, dict):
        return line
    raw = None
    for _ in range(rng.randint(1, 3)):
        paths = _paths(obj)
        if not paths:
            break
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.1 and not isinstance(path[-1], int):
            _set(obj, path, _DELETE)
        elif roll < 0.25:
            raw = rng.choice(RAW_ODD)
            _set(obj, path, _MARK)
        else:
            _set(obj, path, copy.deepcopy(rng.choice(ODD)))
    out = orjson.dumps(obj)
    if raw is not None:
        out = out.replace(orjson.dumps(_MARK), raw, 1)
    if rng.random() < 0.05:  # a key written twice: the last one counts in both decoders
        out = out[:-1] + b',"type":' + orjson.dumps(rng.choice(["user", "assistant", 3])) + b"}"
    return out


def test_mutated_real_lines_equal(lines):
    rng = random.Random(20261121)
    sample = rng.sample(lines, min(len(lines), 4000))
    took = 0
    for line in sample:
        for _ in range(5):
            took += assert_same(mutate(line, rng))
    assert took > 0  # odd lines mostly step aside, but not all of them


def _user_line(tool_use_result: bytes, extra: bytes = b"") -> bytes:
    return (b'{"type":"user","uuid":"u","sessionId":"s","timestamp":"2025-06-01T12:34:56.789Z",'
            b'"message":{"role":"user","content":"hi"}' + extra + b',"toolUseResult":' + tool_use_result + b"}")


def test_a_huge_integer_in_an_ignored_field_stays_on_the_fast_path():
    """parse_fast's one known difference: such an integer is skipped where Python's json (the
    checked path's last resort) refuses the whole line."""
    huge = b"1" * 5000
    for line in (_user_line(b"null", b',"unknownField":' + huge),
                 _user_line(b'{"agentId":"a1","stdout":' + huge + b"}")):
        entry = parse_fast._fast_entry(line, 11)
        assert entry is not None and entry.uuid == "u"
        assert parse_line(line, 11, fast=False).errors == [BadInput.MALFORMED_JSON]
    assert parse_fast._fast_entry(_user_line(b'{"agentId":"a1","stdout":' + huge + b"}"), 11).tool_use_result \
        == {"agentId": "a1"}


@pytest.mark.parametrize("value", [b"1" * 5000, b"1e999", b"-1e400"])
def test_a_number_as_tool_use_result_out_of_range_steps_aside(value):
    """toolUseResult is decoded with its line (a number is read, then ignored): one out of range
    takes the checked path, whose answer stands."""
    line = _user_line(value)
    assert parse_fast._fast_entry(line, 11) is None
    assert_same(line)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 64, 2 ** 64) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=8)
keys = st.sampled_from(["type", "uuid", "parentUuid", "sessionId", "timestamp", "isSidechain", "isMeta", "message",
                        "requestId", "isApiErrorMessage", "toolUseResult", "data", "compactMetadata", "error",
                        "retryAttempt", "subtype", "agentId", "parentToolUseID"])
message = st.fixed_dictionaries({}, optional={
    "id": json_values, "model": json_values, "stop_reason": json_values,
    "usage": st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens",
                                              "cache_creation_input_tokens", "cache_creation"]), json_values),
    "content": st.text(max_size=5) | st.lists(st.dictionaries(
        st.sampled_from(["type", "id", "name", "input", "tool_use_id", "is_error", "text", "content"]),
        st.sampled_from(["tool_use", "tool_result", "text", "thinking"]) | json_values), max_size=3)})


@settings(max_examples=1500, deadline=None)
@given(obj=st.dictionaries(keys, json_values, max_size=8), msg=message,
       etype=st.sampled_from(["user", "assistant", "system", "progress", "summary"]))
def test_generated_lines_equal(obj, msg, etype):
    obj.setdefault("type", etype)
    obj.setdefault("message", msg)
    try:
        data = orjson.dumps(obj)
    except TypeError:  # an int past 64 bits: written as text, as a foreign writer might
        import json
        data = json.dumps(obj).encode()
    assert_same(data)


_TRICKY = st.sampled_from(['a', '"', '\\', '\n', '\t', '\x01', '\x7f', 'é', '€', '\u2028', '😀', '\U0010fffd', '/'])


@settings(max_examples=400, deadline=None)
@given(head=st.text(st.one_of(_TRICKY, st.characters(blacklist_categories=("Cs",))), max_size=120),
       tail=st.text(_TRICKY, min_size=0, max_size=400), pad=st.integers(0, 1200), ascii_only=st.booleans(),
       as_list=st.booleans())
def test_a_long_tool_result_is_read_by_its_head_alone(head, tail, pad, ascii_only, as_list):
    """With content capture off, a long tool_result string is decoded only as far as the kept
    prefix needs (escapes of every length at the cut): the same text as the whole decode, and the
    same entry as the checked path, whether the line is written escaped (json) or not (orjson)."""
    import json

    text = head + tail + "x" * pad
    content: Any = [{"type": "text", "text": text}] if as_list else text
    line = {"type": "user", "uuid": "u", "sessionId": "s", "timestamp": "2025-06-01T12:00:00.000Z",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": content}]}}
    for data in (json.dumps(line, ensure_ascii=ascii_only).encode(), orjson.dumps(line)):
        fast = parse_fast._fast_entry(data, 0, False)
        assert fast is not None, data[:300]
        assert fast.blocks[0].text == text[:parse_full._CLASSIFY_PREFIX]
        assert_same(data)


@pytest.mark.parametrize("char", ["é", "€", "😀"])
@pytest.mark.parametrize("shift", range(4))
def test_a_long_tool_result_cut_inside_a_character_stays_on_the_fast_path(char, shift):
    """The head of a long non-ASCII tool_result cut inside a UTF-8 sequence: stepped back from,
    not a reason to decode the whole line by the checked path (most tool output of the usual shape)."""
    text = "x" * shift + char * 3000
    line = {"type": "user", "uuid": "u", "sessionId": "s", "timestamp": "2025-06-01T12:00:00.000Z",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": text}]}}
    data = orjson.dumps(line)
    fast = parse_fast._fast_entry(data, 0, False)
    assert fast is not None
    assert fast.blocks[0].text == text[:parse_full._CLASSIFY_PREFIX]
    assert_same(data)


@settings(max_examples=500, deadline=None)
@given(text=st.text(_TRICKY, max_size=60),
       junk=st.lists(st.tuples(st.integers(0, 300), st.binary(min_size=1, max_size=3)), max_size=2),
       piece=st.integers(4, 12))
def test_a_long_line_is_checked_for_utf8_piece_by_piece(text, junk, piece):
    """_check_utf8 in pieces (sequences cut at a piece's end, bad bytes anywhere, a sequence cut
    at the end of the line) rejects exactly what one decode rejects. (A piece holds at least 4
    bytes, a whole character: the real one is 32 KiB.)"""
    data = bytearray(text.encode())
    for at, raw in junk:
        data[at % (len(data) + 1):at % (len(data) + 1)] = raw
    data = bytes(data)
    saved = parse_fast._UTF8_PIECE
    parse_fast._UTF8_PIECE = piece
    try:
        try:
            data.decode("utf-8")
            whole = True
        except UnicodeDecodeError:
            whole = False
        try:
            parse_fast._check_utf8(data)
            pieces = True
        except UnicodeDecodeError:
            pieces = False
    finally:
        parse_fast._UTF8_PIECE = saved
    assert pieces == whole, data


def _glued_reference(data: bytes, capture: bool) -> parse.ParseResult:
    """What parse_line made of a line that is not UTF-8 before the fast path read its repair:
    the whole line decoded as text (each bad byte U+FFFD), then its objects."""
    result = parse.ParseResult()
    for obj in parse._decode_glued(data, result):
        if not isinstance(obj, dict):
            result.errors.append("not_an_object")
            continue
        entry = parse_full.to_entry(obj, 11, capture, result.errors)
        if entry is not None:
            result.entries.append(entry)
    del result.errors[1:]  # one line, one error: its first reason
    return result


_BAD_UTF8 = [b"\xff", b"\xfe\xfd", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]


def test_lines_with_invalid_utf8_equal_the_decoding_of_the_whole_text(lines):
    """Bad bytes anywhere in real lines (inside a string, where the line stays one object with
    U+FFFD in it, or between tokens, where it does not): the fast path's reading of the repaired
    line gives exactly what decoding the whole line as text gave."""
    rng = random.Random(20261124)
    sample = [line for line in rng.sample(lines, min(len(lines), 3000)) if line.startswith(b"{")]
    repaired = 0
    for line in sample:
        data = bytearray(line)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.choice(_BAD_UTF8)
        bad = bytes(data)
        for capture in (False, True):
            got, want = parse_line(bad, 11, capture, fast=False), _glued_reference(bad, capture)
            assert got.errors == want.errors, bad[:300]
            assert [vars(e) for e in got.entries] == [vars(e) for e in want.entries], bad[:300]
            repaired += parse_fast._repaired_entry(bad, 11, capture) is not None
    assert repaired > len(sample) // 4  # bytes inside strings: most such lines take the fast path


@settings(max_examples=500, deadline=None)
@given(text=st.text(_TRICKY, max_size=60),
       junk=st.lists(st.tuples(st.integers(0, 300), st.binary(min_size=1, max_size=3)), max_size=3),
       piece=st.integers(1, 9))
def test_invalid_utf8_is_replaced_piece_by_piece_as_in_one_decode(text, junk, piece):
    data = bytearray(text.encode())
    for at, raw in junk:
        data[at % (len(data) + 1):at % (len(data) + 1)] = raw
    saved = parse_fast._UTF8_PIECE
    parse_fast._UTF8_PIECE = piece
    try:
        pieces = parse_fast._replace_invalid_utf8(bytes(data))
    finally:
        parse_fast._UTF8_PIECE = saved
    assert bytes(pieces) == bytes(data).decode("utf-8", "replace").encode("utf-8")
