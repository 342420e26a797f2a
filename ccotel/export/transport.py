"""OTLP transports: send one encoded ExportTraceServiceRequest, say what the backend answered.

Each ``send`` is one attempt and returns an ``ExportResult`` sorted as the OTLP specification
sorts answers (https://opentelemetry.io/docs/specs/otlp/):

- OTLP/HTTP: 2xx is success, its body an ExportTraceServiceResponse whose partial_success may
  reject some spans; 429, 502, 503 and 504 are retryable (``Retry-After`` in seconds or as an
  HTTP date); 413 means the request was too large; every other status is permanent, its body
  a google.rpc.Status carrying the backend's message.
- OTLP/gRPC: CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS are
  retryable, RESOURCE_EXHAUSTED only when the status details hold a RetryInfo (its delay is
  honoured); the rest are permanent.
- A connection refused, reset or timed out is retryable: nothing reached the backend.
- An answer whose body is cut short (the backend closed before its Content-Length or last chunk)
  means what its status means: a 2xx is delivered, and only its partial_success is not known
  (sending again would duplicate the spans it took; docs/durability.md).
- A redirect (3xx) is not followed; the spans are kept (RETRY) until the endpoint is corrected.

Retrying, backoff and splitting are ExportQueue's (export/sinks.py).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
import socket
import stat
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any

from ccotel.export.otlp import decode_partial_success, decode_status
from ccotel.export.result import (
    OK,
    REASON_BAD_REQUEST,
    REASON_CONNECTION,
    REASON_REDIRECT,
    REASON_THROTTLED,
    REASON_TIMEOUT,
    REASON_TOO_LARGE,
    REASON_UNAVAILABLE,
    ExportResult,
)

__all__ = [
    "GrpcTransport",
    "HttpTransport",
    "Transport",
    "TransportConfig",
    "classify_grpc",
    "classify_http",
    "parse_headers",
    "HeaderError",
    "ConfigError",
    "check_endpoint",
    "check_certificate",
    "parse_retry_after",
]

log = logging.getLogger("ccotel.transport")

_MAX_ANSWER_BYTES = 1 << 20  # what is read of an answer body; more only closes the connection
_MESSAGE_CHARS = 300  # of the backend's message, for the log


@dataclass(frozen=True)
class TransportConfig:
    endpoint: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0
    compression: str | None = None  # gzip | None
    insecure: bool | None = None  # gRPC: None means decide from the scheme
    certificate: str | None = None


class Transport:
    """What a transport offers: one attempt per ``send``, of ``spans`` spans encoded in ``body``."""

    def send(self, body: bytes, spans: int) -> ExportResult:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ConfigError(ValueError):
    """OTLP settings no export can work with (an endpoint that is not a URL, a header no request
    can carry, a certificate that cannot be read): refused before any work, exit 2. The message
    names the variable and never holds a header's value."""


class HeaderError(ConfigError):
    """An OTLP header that cannot be sent: a configuration error (the message names the header,
    never its value, which is often a credential)."""


# A header name is an HTTP token (RFC 9110), as gRPC metadata keys are too; a value holds no
# control character (a CR or LF in it would add headers or end the request's head).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_headers(raw: str, source: str = "OTEL_EXPORTER_OTLP_HEADERS") -> tuple[tuple[str, str], ...]:
    """OTEL_EXPORTER_OTLP_HEADERS: k=v,k2=v2 with percent-encoded values. A header no request can
    carry raises HeaderError (``source``: the variable it came from), so the configuration is
    refused at start instead of every export failing, and retried, for ever."""
    out = []
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            name, text = key.strip().lower(), urllib.parse.unquote(value.strip())
            if not _TOKEN.fullmatch(name):
                raise HeaderError(f"{source}: invalid header name {_clean(name)!r} (letters, digits and "
                                  "!#$%&'*+-.^_`|~ only)")
            if _CONTROL.search(text):
                raise HeaderError(f"{source}: the value of header {name!r} holds a line break or another control "
                                  "character (its value is not shown)")
            if not text.isascii():  # HTTP/1.1 would send other bytes than meant, gRPC refuses it
                raise HeaderError(f"{source}: the value of header {name!r} holds a character outside ASCII "
                                  "(percent-encode what the backend expects; its value is not shown)")
            out.append((name, text))
    return tuple(out)


_URL_SPACE = re.compile(r"[\x00-\x20\x7f]")


def check_endpoint(endpoint: str, grpc: bool, source: str) -> None:
    """Raise ConfigError unless ``endpoint`` is a URL an exporter can use: OTLP/HTTP an http or
    https URL with a host, gRPC that or host:port; a valid port; no space or control character
    (it would end up in the request line). The message does not repeat the URL (it may hold a
    user and password)."""
    if _URL_SPACE.search(endpoint):
        raise ConfigError(f"{source}: holds a space or a control character")
    try:
        url = urllib.parse.urlsplit(endpoint if not grpc or "://" in endpoint else f"http://{endpoint}")
        port = url.port
    except ValueError as exc:
        raise ConfigError(f"{source}: not a URL ({_clean(str(exc).split(':')[0])})") from None
    if url.scheme not in ("http", "https"):
        raise ConfigError(f"{source}: an http:// or https:// URL expected")
    if not url.hostname:
        raise ConfigError(f"{source}: the URL has no host")
    if port == 0:
        raise ConfigError(f"{source}: port 0")


def check_certificate(path: str, source: str) -> None:
    """Raise ConfigError unless ``path`` is a regular file that can be opened (the TLS roots;
    opened without blocking: a FIFO would wait for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"{source}: {_clean(repr(path))} cannot be read ({exc.strerror or type(exc).__name__})") \
            from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if not regular:
        raise ConfigError(f"{source}: {_clean(repr(path))} is not a regular file")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delay-seconds or an HTTP date; None if absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        import email.utils  # here, not above: only a date needs the email package (see HTTPException)

        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


_SPACES = re.compile(r"\s+")


def _clean(text: str) -> str:
    """One line of printable text, at most _MESSAGE_CHARS long."""
    text = _SPACES.sub(" ", "".join(c if c.isprintable() else " " for c in text)).strip()
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS - 1] + "…"


def _content_type(headers: Mapping[str, str]) -> str:
    for k, v in headers.items():
        if k.lower() == "content-type":
            return v.split(";")[0].strip().lower()
    return ""


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def _partial_success(ctype: str, body: bytes) -> tuple[int, str]:
    if not body:
        return 0, ""
    if ctype == "application/json":
        doc = json.loads(body)
        part = (doc.get("partialSuccess") or doc.get("partial_success")) if isinstance(doc, dict) else None
        if not isinstance(part, dict):
            return 0, ""
        rejected = part.get("rejectedSpans", part.get("rejected_spans")) or 0
        message = part.get("errorMessage", part.get("error_message")) or ""
        return int(rejected), str(message)
    return decode_partial_success(body)


def _error_details(ctype: str, body: bytes) -> tuple[str, float | None]:
    """The backend's message (and RetryInfo delay) from an error body: a google.rpc.Status in
    protobuf or JSON, else the text itself."""
    if not body:
        return "", None
    try:
        if ctype == "application/json":
            doc = json.loads(body)
            if isinstance(doc, dict) and isinstance(doc.get("message"), str):
                return _clean(doc["message"]), None
        elif ctype in ("application/x-protobuf", "application/protobuf", "application/grpc"):
            status = decode_status(body)
            return _clean(status.message), status.retry_delay_s
    except ValueError:  # json.JSONDecodeError is one; a body that is not what it says it is
        pass
    return _clean(body.decode("utf-8", "replace")), None


def classify_http(status: int, reason: str, headers: Mapping[str, str], body: bytes, spans: int) -> ExportResult:
    """An OTLP/HTTP answer (body already decompressed) as an ExportResult for ``spans`` spans."""
    ctype = _content_type(headers)
    if 200 <= status < 300:
        try:
            rejected, message = _partial_success(ctype, body)
        except (ValueError, TypeError, AttributeError):
            log.debug("unreadable OTLP response body (%d bytes, %s)", len(body), ctype or "no content type")
            return OK
        if rejected <= 0 and not message:
            return OK
        return ExportResult.partial(min(max(rejected, 0), spans), _clean(f"HTTP {status}: {message}"))
    said, delay = _error_details(ctype, body)
    message = f"HTTP {status} {reason}".strip() + (f": {said}" if said else "")
    if status in (429, 502, 503, 504):
        retry_after = parse_retry_after(_header(headers, "retry-after"))
        return ExportResult.retry(REASON_THROTTLED if status == 429 else REASON_UNAVAILABLE, message,
                                  retry_after if retry_after is not None else delay)
    if status == 413:
        return ExportResult.drop(spans, REASON_TOO_LARGE, message)
    if 300 <= status < 400:  # the endpoint moved: a setting to fix, not spans to lose meanwhile
        where = _header(headers, "location")
        return ExportResult.retry(REASON_REDIRECT, f"{message}; ccotel does not follow redirects: set "
                                  f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT{f' to {_clean(where)}' if where else ''}")
    return ExportResult.drop(spans, REASON_BAD_REQUEST if status == 400 else f"http_{status}", message)


def _connection_failure(exc: BaseException) -> ExportResult:
    timed_out = isinstance(exc, (TimeoutError, socket.timeout))
    text = str(exc) or type(exc).__name__
    return ExportResult.retry(REASON_TIMEOUT if timed_out else REASON_CONNECTION,
                              _clean(f"{type(exc).__name__}: {text}" if str(exc) else text))


_MAX_LINE = 65536  # of a status or header line (http.client's limit)
_MAX_HEADERS = 100


# http.client's exceptions, by the same names, bases and messages (a failed export's reason names
# them), without importing http.client: it imports ssl and the email package, whose memory every
# process that exports would hold (each catch-up worker among them) though plain http never uses them.
class HTTPException(Exception):
    """What came is not an HTTP answer."""


class LineTooLong(HTTPException):
    def __init__(self, line_type: str) -> None:
        super().__init__(f"got more than {_MAX_LINE} bytes when reading {line_type}")


class BadStatusLine(HTTPException):
    def __init__(self, line: str) -> None:
        super().__init__(line or repr(line))


class RemoteDisconnected(ConnectionResetError, BadStatusLine):
    """The peer closed before answering (a kept-alive connection it had closed: send again)."""

    def __init__(self, message: str) -> None:
        ConnectionResetError.__init__(self, message)
_LEGAL_NAME = re.compile(r"[^:\s][^:\r\n]*")
_ILLEGAL_VALUE = re.compile(r"\n(?![ \t])|\r(?![ \t\n])")


@dataclass(frozen=True)
class _Answer:
    """An HTTP answer: headers with their names lower-cased, the body (at most the limit),
    whether the connection may carry the next request, and whether the body ended before its
    framing said (the peer closed mid-body, or sent a bad chunk size)."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    keep: bool
    cut: bool = False


class _Connection:
    """One kept-alive HTTP/1.1 connection: the request written in one send (headers and body
    together: no wait between them for an acknowledgement), the answer read by its status line,
    headers and Content-Length, chunked framing or the connection's close. http.client parsed
    every answer's headers with the email package (a large share of the CPU a small request
    took), and a live sidecar sends one request per poll."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self, limit: int) -> _Answer:
        """The next answer; 1xx interim answers (100 Continue) are skipped. Raises
        RemoteDisconnected when the peer closed before answering, HTTPException
        subclasses when what came is not HTTP, OSError (a timeout) from the socket."""
        while True:
            version, status, reason = self._status_line()
            headers = self._headers()
            if not 100 <= status < 200:
                break
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if status in (204, 304):
            return _Answer(status, reason, headers, b"", keep)
        cut = False
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body, whole, cut = self._chunked(limit)
        elif "content-length" in headers:
            body, whole, cut = self._sized(headers["content-length"], limit)
        else:  # delimited by the close
            body, whole = self.rfile.read(limit), False
        return _Answer(status, reason, headers, body, keep and whole, cut)

    def _line(self) -> bytes:
        line = self.rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise LineTooLong("header line")
        return line

    def _status_line(self) -> tuple[str, int, str]:
        line = self._line()
        if not line:
            raise RemoteDisconnected("Remote end closed connection without response")
        version, _, rest = line.decode("iso-8859-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
            raise BadStatusLine(line.decode("iso-8859-1", "replace"))
        return version, int(code), reason.strip()

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        last = ""
        for _ in range(_MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n", b""):
                return headers
            text = line.decode("iso-8859-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and last:  # an obsolete folded continuation
                headers[last] += " " + text.strip()
                continue
            name, _, value = text.partition(":")
            last = name.strip().lower()
            headers[last] = value.strip()
        raise HTTPException(f"got more than {_MAX_HEADERS} headers")

    def _sized(self, length: str, limit: int) -> tuple[bytes, bool, bool]:
        """The body, whether it was read to its end, whether it was cut short."""
        try:
            n = int(length)
        except ValueError:
            raise HTTPException(f"bad Content-Length {length!r}") from None
        if n < 0:
            raise HTTPException(f"bad Content-Length {length!r}")
        body = self.rfile.read(min(n, limit))  # short if the peer closed early: the status still holds
        return body, n <= limit and len(body) == n, len(body) < min(n, limit)

    def _chunked(self, limit: int) -> tuple[bytes, bool, bool]:
        """The body, whether it was read to its end, whether it was cut short (the peer closed,
        or a chunk size that is not one): as a body cut short by Content-Length, the status holds."""
        parts: list[bytes] = []
        size_so_far = 0
        while True:
            line = self._line()
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                return b"".join(parts), False, True
            if size == 0:
                while self._line() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts), True, False
            if size_so_far + size > limit:  # more than anything OTLP answers: not read to its end
                parts.append(self.rfile.read(limit - size_so_far))
                return b"".join(parts), False, False
            data = self.rfile.read(size)
            parts.append(data)
            if len(data) < size:
                return b"".join(parts), False, True
            size_so_far += size
            self.rfile.read(2)  # the CRLF after the chunk


class HttpTransport(Transport):
    """POST to an OTLP/HTTP endpoint over one kept-alive connection."""

    def __init__(self, cfg: TransportConfig) -> None:
        self.cfg = cfg
        url = urllib.parse.urlsplit(cfg.endpoint)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._path = url.path or "/v1/traces"
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == (443 if self._https else 80) else f"{host}:{self._port}"
        self._conn: _Connection | None = None
        self._cut_answers = 0

    def _connection(self) -> _Connection:
        if self._conn is None:
            sock = socket.create_connection((self._host, self._port), timeout=self.cfg.timeout_s)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._https:
                    import ssl  # here, not above: only https needs it (see HTTPException)

                    ctx = ssl.create_default_context(cafile=self.cfg.certificate)
                    sock = ctx.wrap_socket(sock, server_hostname=self._host)
            except BaseException:
                sock.close()
                raise
            self._conn = _Connection(sock)
        return self._conn

    def _request(self, body: bytes, headers: dict[str, str]) -> bytes:
        """The request's bytes. Header names and values are checked as http.client checks them
        (no line breaks: nothing can be added to the request through OTEL_EXPORTER_OTLP_HEADERS)."""
        lines = [f"POST {self._path} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity",
                 f"Content-Length: {len(body)}"]
        for name, value in headers.items():
            if not _LEGAL_NAME.fullmatch(name) or _ILLEGAL_VALUE.search(value):
                raise HeaderError(f"invalid header {name!r} (its value is not shown)")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def send(self, body: bytes, spans: int) -> ExportResult:
        headers = {"Content-Type": "application/x-protobuf", **dict(self.cfg.headers)}
        if self.cfg.compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        request = self._request(body, headers)
        while True:
            reused = self._conn is not None
            try:
                conn = self._connection()
            except OSError as exc:  # refused, unreachable, timed out, TLS refused
                return _connection_failure(exc)
            try:
                conn.send(request)
            except (BrokenPipeError, ConnectionResetError) as exc:
                # A backend that refuses a large body may answer (413) and close before reading
                # it all: its answer can still be read. Else a kept-alive connection it had
                # closed: connect once more.
                answer = self._late_answer(conn, spans)
                self.close()
                if answer is not None:
                    return answer
                if not reused:
                    return _connection_failure(exc)
                continue
            except OSError as exc:
                self.close()
                if reused and not isinstance(exc, (TimeoutError, socket.timeout)):
                    continue
                return _connection_failure(exc)
            try:
                return self._answer(conn, spans)
            except (OSError, HTTPException) as exc:
                self.close()
                if reused and isinstance(exc, (RemoteDisconnected, ConnectionResetError)):
                    continue  # closed while idle, noticed only now
                return _connection_failure(exc)

    def _answer(self, conn: _Connection, spans: int) -> ExportResult:
        answer = conn.answer(_MAX_ANSWER_BYTES)
        if not answer.keep:
            self.close()  # the backend closes it, or an answer larger than anything OTLP sends
        raw = answer.body
        if answer.cut and 200 <= answer.status < 300:
            self._cut_answer(answer)
        if answer.headers.get("content-encoding", "").lower() == "gzip":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError):
                raw = b""
        return classify_http(answer.status, answer.reason, answer.headers, raw, spans)

    def _cut_answer(self, answer: _Answer) -> None:
        """A 2xx whose body was cut short: the status says the backend took the spans, so they are
        delivered and not sent again (OTLP success is the status; sending again would duplicate
        what it took, and spans it rejected in a partial_success are not to be retried anyway).
        What is lost is only that answer's count of rejected spans: said once at WARNING."""
        self._cut_answers += 1
        log.log(logging.WARNING if self._cut_answers == 1 else logging.DEBUG,
                "the trace backend answered HTTP %d and its answer was cut short (%d bytes read): the spans are "
                "counted as delivered; any it rejected in that answer (partial success) are not known%s",
                answer.status, len(answer.body), "" if self._cut_answers == 1 else f" ({self._cut_answers} so far)")

    def _late_answer(self, conn: _Connection, spans: int) -> ExportResult | None:
        try:
            return self._answer(conn, spans)
        except Exception:  # noqa: BLE001 - no answer came before the connection broke
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# gRPC status codes (grpc.StatusCode values), as the OTLP/gRPC specification sorts them.
_GRPC_RETRYABLE = frozenset(("CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE",
                             "DATA_LOSS"))
_GRPC_DETAILS_KEY = "grpc-status-details-bin"
_TOO_LARGE_WORDS = ("larger than max", "message too large", "too large")


def classify_grpc(code: str, details: str, trailing: Mapping[str, str | bytes], spans: int) -> ExportResult:
    """A failed OTLP/gRPC call (``code``: the grpc.StatusCode name) as an ExportResult."""
    said, delay = _clean(details or ""), None
    raw = trailing.get(_GRPC_DETAILS_KEY)
    if isinstance(raw, bytes):
        try:
            status = decode_status(raw)
            said, delay = _clean(status.message) or said, status.retry_delay_s
        except ValueError:
            pass
    message = f"gRPC {code}" + (f": {said}" if said else "")
    if code in _GRPC_RETRYABLE:
        reason = {"UNAVAILABLE": REASON_UNAVAILABLE, "DEADLINE_EXCEEDED": REASON_TIMEOUT}.get(code,
                                                                                           f"grpc_{code.lower()}")
        return ExportResult.retry(reason, message, delay)
    if code == "RESOURCE_EXHAUSTED":
        if delay is not None:  # the backend says it can recover: throttling
            return ExportResult.retry(REASON_THROTTLED, message, delay)
        if any(w in said.lower() for w in _TOO_LARGE_WORDS):
            return ExportResult.drop(spans, REASON_TOO_LARGE, message)
    reason = REASON_BAD_REQUEST if code == "INVALID_ARGUMENT" else f"grpc_{code.lower()}"
    return ExportResult.drop(spans, reason, message)


class GrpcTransport(Transport):
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
            self._channel: Any = grpc.insecure_channel(target, compression=compression)
        else:
            root = None
            if cfg.certificate:
                with open(cfg.certificate, "rb") as f:
                    root = f.read()
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root), compression=compression)
        self._call: Any = self._channel.unary_unary(self.METHOD)
        self._grpc: Any = grpc

    def send(self, body: bytes, spans: int) -> ExportResult:
        try:
            answer = self._call(body, timeout=self.cfg.timeout_s, metadata=list(self.cfg.headers) or None)
        except self._grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            trailing = dict(err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else {}
            details = err.details() if hasattr(err, "details") else str(err)
            return classify_grpc(code.name if code is not None else "UNKNOWN", details or "", trailing, spans)
        try:
            rejected, message = decode_partial_success(answer if isinstance(answer, bytes) else b"")
        except ValueError:
            return OK
        if rejected <= 0 and not message:
            return OK
        return ExportResult.partial(min(max(rejected, 0), spans), _clean(f"gRPC OK: {message}"))

    def close(self) -> None:
        self._channel.close()
