"""OTLP trace protobuf: the ExportTraceServiceRequest encoder and the few decoders of answers.

Encoding by hand: SpanRecords are already final, so building SDK span objects or generated
protobuf messages only to serialise them would cost more than the rest of the pipeline.
The bytes are those of opentelemetry-proto's ExportTraceServiceRequest (tests decode them with
the official classes and compare with the SDK's own encoder). The decoders read what a backend
answers: ExportTraceServiceResponse.partial_success and google.rpc.Status (with RetryInfo).
Sending is transport.py's job; retries and backoff are ExportQueue's.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ccotel.records import SpanRecord
from ccotel.spans.attributes import (
    CLAUDE_CODE_PARENT_UUID,
    CLAUDE_CODE_REQUEST_ID,
    CLAUDE_CODE_TOOL_AGENT_ID,
    CLAUDE_CODE_UUID,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_AGENT_ID,
    GEN_AI_RESPONSE_ID,
    GEN_AI_TOOL_CALL_ID,
)

__all__ = ["RpcStatus", "decode_partial_success", "decode_status", "encode_request", "encode_span"]

_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack


def _varint_slow(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Every varint below 2**14 (lengths of nearly all fields, small ints), looked up instead of built.
_VT_LIMIT = 1 << 14
_VT = tuple([bytes((n,)) for n in range(0x80)] + [bytes((n & 0x7F | 0x80, n >> 7)) for n in range(0x80, _VT_LIMIT)])


def _varint(n: int) -> bytes:
    if 0 <= n < _VT_LIMIT:
        return _VT[n]
    if 0 < n < 1 << 28:  # token counts, sizes: three or four bytes, built without a loop
        if n < 1 << 21:
            return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21))
    return _varint_slow(n)


def _ld(field_tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    n = len(payload)
    return field_tag + (_VT[n] if n < _VT_LIMIT else _varint_slow(n)) + payload


# Precomputed tags: (field << 3) | wire type
_T_STR1 = b"\x0a"  # field 1, length-delimited
_T_2LD = b"\x12"
_T_3LD = b"\x1a"
_T_4LD = b"\x22"
_T_5LD = b"\x2a"
_T_9LD = b"\x4a"
_T_11LD = b"\x5a"
_T_15LD = b"\x7a"
_T_BOOL2 = b"\x10"
_T_INT3 = b"\x18"
_T_DBL4 = b"\x21"
_T_KIND6 = b"\x30"
_T_START7 = b"\x39"
_T_END8 = b"\x41"
_T_TIME1 = b"\x09"
_T_CODE3 = b"\x18"
_T_FLAGS16 = b"\x85\x01"

_FLAGS = _T_FLAGS16 + struct.pack("<I", 0x100)  # "is the parent remote" is known: it is not
_EMPTY_STATUS = _ld(_T_15LD, b"")
_BOOL_VALUES = {True: _T_BOOL2 + b"\x01", False: _T_BOOL2 + b"\x00"}


def _any_value(v: Any) -> bytes:
    if isinstance(v, str):
        return _ld(_T_STR1, v.encode("utf-8", "replace"))
    if isinstance(v, bool):
        return _T_BOOL2 + (b"\x01" if v else b"\x00")
    if isinstance(v, int):
        return _T_INT3 + _varint(v)
    if isinstance(v, float):
        return _T_DBL4 + _pack_d(v)
    if isinstance(v, (tuple, list)):
        return _ld(_T_5LD, b"".join(_ld(_T_STR1, _any_value(x)) for x in v))
    if isinstance(v, bytes):
        return _ld(b"\x3a", v)
    return _ld(_T_STR1, str(v).encode("utf-8", "replace"))


# KeyValue.key field bytes per attribute key (a few dozen distinct keys; bounded all the same).
_KEYS: dict[str, bytes] = {}
# Whole attribute bytes (tag, length, KeyValue) for frequent short string values and 1-tuples of
# them: session ids, models, operation names, cwd, versions, finish reasons repeat on most spans.
# Bounded; emptied when full.
_KV_CACHE: dict[tuple[bytes, str, Any], bytes] = {}
_KV_CACHE_MAX = 4096
_KV_STR_VALUE_MAX = 128
# Ids unique to one span: caching them would only evict the values that do repeat.
_NEVER_CACHED = frozenset((CLAUDE_CODE_UUID, CLAUDE_CODE_PARENT_UUID, CLAUDE_CODE_REQUEST_ID,
                           GEN_AI_RESPONSE_ID, GEN_AI_TOOL_CALL_ID, GEN_AI_AGENT_ID,
                           GEN_AI_AGENT_DESCRIPTION, CLAUDE_CODE_TOOL_AGENT_ID))


def _key(k: str) -> bytes:
    kb = _KEYS.get(k)
    if kb is None:
        kb = _ld(_T_STR1, k.encode("utf-8", "replace"))
        if len(_KEYS) < 1024:
            _KEYS[k] = kb
    return kb


# Per (tag, key): the bytes before an int value's varint, by the varint's length (index 1..10):
# tag, KeyValue length, key field, value tag, AnyValue length, int tag. Bounded like _KEYS.
_INT_HEADS: dict[tuple[bytes, str], tuple[bytes, ...]] = {}


def _int_heads(tag: bytes, k: str) -> tuple[bytes, ...]:
    heads = _INT_HEADS.get((tag, k))
    if heads is None:
        kb = _key(k) + _T_2LD
        heads = (b"",) + tuple(tag + _varint(len(kb) + 2 + n) + kb + _VT[1 + n] + _T_INT3 for n in range(1, 11))
        if len(_INT_HEADS) < 1024:
            _INT_HEADS[(tag, k)] = heads
    return heads


def _key_values(attrs: dict[str, Any], tag: bytes) -> bytes:
    # Its loop runs once per attribute of every span. Non-negative ints (token counts) are a per-key prefix and the
    # varint; short repeated strings are cached whole; the rest is built field by field.
    out: list[bytes] = []
    append = out.append
    cache = _KV_CACHE
    for k, v in attrs.items():
        t = type(v)
        if t is int and v >= 0:
            vb = _VT[v] if v < _VT_LIMIT else _varint(v)
            heads = _INT_HEADS.get((tag, k)) or _int_heads(tag, k)
            append(heads[len(vb)] + vb)
            continue
        if v is None:
            continue
        if ((t is str and len(v) <= _KV_STR_VALUE_MAX) or (t is tuple and len(v) == 1 and type(v[0]) is str
                                                           and len(v[0]) <= _KV_STR_VALUE_MAX)) \
                and k not in _NEVER_CACHED:
            ck = (tag, k, v)
            kv = cache.get(ck)
            if kv is None:
                kv = _ld(tag, _key(k) + _ld(_T_2LD, _any_value(v)))
                if len(cache) >= _KV_CACHE_MAX:
                    cache.clear()
                cache[ck] = kv
            append(kv)
            continue
        if t is str:
            any_v = _ld(_T_STR1, v.encode("utf-8", "replace"))
        elif t is int:
            any_v = _T_INT3 + _varint(v)
        elif t is bool:
            any_v = _BOOL_VALUES[v]
        elif t is float:
            any_v = _T_DBL4 + _pack_d(v)
        else:
            any_v = _any_value(v)
        kb = _KEYS.get(k) or _key(k)
        n = len(any_v)
        kv = kb + _T_2LD + (_VT[n] if n < _VT_LIMIT else _varint_slow(n)) + any_v
        n = len(kv)
        append(tag + (_VT[n] if n < _VT_LIMIT else _varint_slow(n)) + kv)
    return b"".join(out)


_KIND_FIELD = {k: _T_KIND6 + _varint(k) for k in range(8)}


def encode_span(s: SpanRecord) -> bytes:
    parts = [
        b"\x0a\x10" + s.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + s.span_id.to_bytes(8, "big"),
    ]
    if s.parent_span_id:
        parts.append(b"\x22\x08" + s.parent_span_id.to_bytes(8, "big"))
    parts.append(_ld(_T_5LD, s.name.encode("utf-8", "replace")))
    kind = _KIND_FIELD.get(s.kind)  # OTLP enum: INTERNAL=1, SERVER=2, CLIENT=3
    parts.append(kind if kind is not None else _T_KIND6 + _varint(int(s.kind) + 0))
    parts.append(_T_START7 + _pack_q(s.start_ns))
    parts.append(_T_END8 + _pack_q(s.end_ns))
    parts.append(_key_values(s.attributes, _T_9LD))
    for e in s.events:
        body = _T_TIME1 + _pack_q(e.time_ns) + _ld(_T_2LD, e.name.encode("utf-8", "replace"))
        body += _key_values(e.attributes, _T_3LD)
        parts.append(_ld(_T_11LD, body))
    code = int(s.status)
    if code:
        status = b""
        if s.status_message and code == 2:
            status += _ld(_T_2LD, s.status_message.encode("utf-8", "replace"))
        status += _T_CODE3 + _varint(code)
        parts.append(_ld(_T_15LD, status))
    else:
        parts.append(_EMPTY_STATUS)
    parts.append(_FLAGS)
    return b"".join(parts)


def encode_request(spans: Iterable[SpanRecord], resource: dict[str, Any], scope_name: str,
                   scope_version: str) -> bytes:
    """ExportTraceServiceRequest with one ResourceSpans and one ScopeSpans. The spans' bytes are
    copied once, into the request: each enclosing message's length is summed before its bytes
    are joined (a batch is hundreds of KB, and every copy of it a new block to allocate)."""
    scope_spans: list[bytes] = [_ld(_T_STR1, _ld(_T_STR1, scope_name.encode()) + _ld(_T_2LD, scope_version.encode()))]
    for s in spans:
        span = encode_span(s)
        scope_spans += (_T_2LD, _varint(len(span)), span)
    scope_len = sum(map(len, scope_spans))
    resource_spans_head = _ld(_T_STR1, _key_values(resource, _T_STR1)) + _T_2LD + _varint(scope_len)
    resource_spans_len = len(resource_spans_head) + scope_len
    return b"".join([_T_STR1, _varint(resource_spans_len), resource_spans_head, *scope_spans])




# -- decoding the backend's answers ------------------------------------------------------------

_R = TypeVar("_R")


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of one message: ints for varints and fixed
    numbers, bytes for length-delimited fields. ValueError on malformed input."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            size, i = _read_varint(buf, i)
            if i + size > n:
                raise ValueError("truncated field")
            value, i = buf[i:i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if i + width > n:
                raise ValueError("truncated field")
            value, i = int.from_bytes(buf[i:i + width], "little"), i + width
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if field == 0:
            raise ValueError("field number 0")
        yield field, value


def _int64(v: int | bytes) -> int:
    if not isinstance(v, int):
        raise TypeError("expected a varint")
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(v: int | bytes) -> str:
    if not isinstance(v, bytes):
        raise TypeError("expected a string")
    return v.decode("utf-8", "replace")


def _message(v: int | bytes) -> bytes:
    if not isinstance(v, bytes):
        raise TypeError("expected a message")
    return v


def _malformed_is_value_error(fn: Callable[[bytes], _R]) -> Callable[[bytes], _R]:
    """A field of the wrong wire type is malformed input too: ValueError, as for the rest."""

    @functools.wraps(fn)
    def decode(body: bytes) -> _R:
        try:
            return fn(body)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc
    return decode


@_malformed_is_value_error
def decode_partial_success(body: bytes) -> tuple[int, str]:
    """ExportTraceServiceResponse -> (partial_success.rejected_spans, partial_success.error_message).

    (0, "") for an empty answer, which is the usual full success. ValueError if malformed."""
    rejected, message = 0, ""
    for field, value in _fields(body):
        if field == 1:  # partial_success
            for f, v in _fields(_message(value)):
                if f == 1:
                    rejected = _int64(v)
                elif f == 2:
                    message = _text(v)
    return rejected, message


_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@dataclass(frozen=True)
class RpcStatus:
    """google.rpc.Status: gRPC code, message and, from its details, RetryInfo's delay."""

    code: int
    message: str
    retry_delay_s: float | None = None


@_malformed_is_value_error
def decode_status(body: bytes) -> RpcStatus:
    """google.rpc.Status (an OTLP/HTTP error body, or gRPC's grpc-status-details-bin).
    ValueError if malformed."""
    code, message, delay = 0, "", None
    for field, value in _fields(body):
        if field == 1:
            code = _int64(value)
        elif field == 2:
            message = _text(value)
        elif field == 3:  # details: repeated google.protobuf.Any
            type_url, payload = "", b""
            for f, v in _fields(_message(value)):
                if f == 1:
                    type_url = _text(v)
                elif f == 2:
                    payload = _message(v)
            if type_url == _RETRY_INFO:
                delay = _retry_delay(payload)
    return RpcStatus(code, message, delay)


def _retry_delay(retry_info: bytes) -> float | None:
    """RetryInfo.retry_delay (a google.protobuf.Duration) in seconds."""
    for field, value in _fields(retry_info):
        if field == 1:
            seconds = nanos = 0
            for f, v in _fields(_message(value)):
                if f == 1:
                    seconds = _int64(v)
                elif f == 2:
                    nanos = _int64(v)
            return max(seconds + nanos / 1e9, 0.0)
    return None
