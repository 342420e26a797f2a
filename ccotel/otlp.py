"""OTLP trace protobuf encoding and transports (HTTP/protobuf and gRPC), one attempt per call.

Encoding by hand: SpanRecords are already final, so building SDK span objects or generated
protobuf messages only to serialise them would cost more than the rest of the pipeline.
The bytes are those of opentelemetry-proto's ExportTraceServiceRequest (tests decode them with
the official classes and compare with the SDK's own encoder). Retries and backoff live in
ExportQueue, so a dead backend is noticed at the first refused connection.
"""

from __future__ import annotations

import gzip
import http.client
import ssl
import struct
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .records import SpanRecord

__all__ = ["encode_request", "encode_span", "HttpTransport", "GrpcTransport", "TransportConfig", "parse_headers"]

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
_NEVER_CACHED = frozenset(("claude_code.uuid", "claude_code.parent_uuid", "claude_code.request_id",
                           "gen_ai.response.id", "gen_ai.tool.call.id", "gen_ai.agent.id",
                           "gen_ai.agent.description", "claude_code.tool.agent_id"))


def _key(k: str) -> bytes:
    kb = _KEYS.get(k)
    if kb is None:
        kb = _ld(_T_STR1, k.encode("utf-8", "replace"))
        if len(_KEYS) < 1024:
            _KEYS[k] = kb
    return kb


def _key_values(attrs: dict[str, Any], tag: bytes) -> bytes:
    out = []
    append = out.append
    cache = _KV_CACHE
    for k, v in attrs.items():
        if v is None:
            continue
        t = type(v)
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
    """ExportTraceServiceRequest with one ResourceSpans and one ScopeSpans."""
    scope = _ld(_T_STR1, _ld(_T_STR1, scope_name.encode()) + _ld(_T_2LD, scope_version.encode()))
    scope_spans = scope + b"".join([_ld(_T_2LD, encode_span(s)) for s in spans])
    resource_spans = _ld(_T_STR1, _key_values(resource, _T_STR1)) + _ld(_T_2LD, scope_spans)
    return _ld(_T_STR1, resource_spans)


@dataclass(frozen=True)
class TransportConfig:
    endpoint: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0
    compression: str | None = None  # gzip | None
    insecure: bool | None = None  # gRPC: None means decide from the scheme
    certificate: str | None = None


class HttpTransport:
    """POST to an OTLP/HTTP endpoint over one kept-alive connection."""

    def __init__(self, cfg: TransportConfig) -> None:
        self.cfg = cfg
        url = urllib.parse.urlsplit(cfg.endpoint)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._path = url.path or "/v1/traces"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                ctx = ssl.create_default_context(cafile=self.cfg.certificate)
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.cfg.timeout_s,
                                                         context=ctx)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.cfg.timeout_s)
        return self._conn

    def send(self, body: bytes) -> bool:
        headers = {"Content-Type": "application/x-protobuf", **dict(self.cfg.headers)}
        if self.cfg.compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            conn = self._connection()
            try:
                conn.request("POST", self._path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                return 200 <= resp.status < 300
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    return False
        return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class GrpcTransport:
    """The OTLP TraceService/Export call with pre-encoded bytes (no generated message objects)."""

    METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

    def __init__(self, cfg: TransportConfig) -> None:
        import grpc

        self.cfg = cfg
        url = urllib.parse.urlsplit(cfg.endpoint if "://" in cfg.endpoint else f"http://{cfg.endpoint}")
        target = f"{url.hostname}:{url.port or 4317}"
        insecure = cfg.insecure if cfg.insecure is not None else url.scheme != "https"
        compression = grpc.Compression.Gzip if cfg.compression == "gzip" else None
        if insecure:
            self._channel = grpc.insecure_channel(target, compression=compression)
        else:
            root = open(cfg.certificate, "rb").read() if cfg.certificate else None
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root), compression=compression)
        self._call = self._channel.unary_unary(self.METHOD)
        self._grpc = grpc

    def send(self, body: bytes) -> bool:
        try:
            self._call(body, timeout=self.cfg.timeout_s, metadata=list(self.cfg.headers) or None)
            return True
        except self._grpc.RpcError:
            return False

    def close(self) -> None:
        self._channel.close()


def parse_headers(raw: str) -> tuple[tuple[str, str], ...]:
    """OTEL_EXPORTER_OTLP_HEADERS: k=v,k2=v2 with percent-encoded values."""
    out = []
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out.append((key.strip().lower(), urllib.parse.unquote(value.strip())))
    return tuple(out)

