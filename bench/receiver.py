"""An OTLP/HTTP trace receiver for benchmarks, run as its own process so that it does not take the
measured process's CPU time or GIL.

    python -m bench.receiver [--save DIR] [--ids-prefix toolu_live_]

Prints ``PORT <n>`` on its first stdout line. Every ``POST /v1/traces`` is answered 200 at once.
It counts requests, bytes and spans, without decoding: every span ccotel sends has exactly one
``gen_ai.operation.name`` attribute, so the span count is the number of times that encoded key
occurs. ``--save DIR`` writes each body to DIR (decoded and compared later); ``--ids-prefix P``
records, for every id ``P<letters>_<6 digits>`` found in a body (the live benchmarks name their
tool_use ids so), the wall-clock time (time.time_ns) the request carrying it arrived. ``GET /stats``
returns the counters and ids as JSON (``?since=<n>``: only the ids after the n-th).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import orjson

# KeyValue.key (field 1, length 21) = "gen_ai.operation.name": once per span ccotel exports
_SPAN_MARK = b"\x0a\x15gen_ai.operation.name"


class _State:
    def __init__(self, save: str | None, ids_prefix: str | None) -> None:
        self.save = save
        # ids are <prefix><letters>_<6 digits>: a fixed end, whatever protobuf byte follows
        self.ids = re.compile(re.escape(ids_prefix.encode()) + rb"[a-z]+_[0-9]{6}") if ids_prefix else None
        self.requests = 0
        self.bytes = 0
        self.spans = 0
        self.arrivals: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def take(self, body: bytes, arrived: int) -> None:
        with self.lock:
            n = self.requests
            self.requests += 1
            self.bytes += len(body)
        if self.save:
            with open(os.path.join(self.save, f"{n:06d}.pb"), "wb") as f:
                f.write(body)
        spans = body.count(_SPAN_MARK)
        found = [(m.decode(), arrived) for m in dict.fromkeys(self.ids.findall(body))] if self.ids else []
        with self.lock:
            self.spans += spans
            self.arrivals.extend(found)

    def stats(self, since: int) -> bytes:
        with self.lock:
            doc: dict[str, Any] = {"requests": self.requests, "bytes": self.bytes, "spans": self.spans,
                                   "arrivals_total": len(self.arrivals)}
            doc["arrivals"] = self.arrivals[since:]
        return orjson.dumps(doc)


def serve(port: int, save: str | None, ids_prefix: str | None) -> None:
    state = _State(save, ids_prefix)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a collector

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            arrived = time.time_ns()
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
            state.take(body, arrived)

        def do_GET(self) -> None:  # noqa: N802
            since = 0
            if "?since=" in self.path:
                since = int(self.path.split("?since=", 1)[1] or 0)
            out = state.stats(since)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(HTTPServer):
        daemon_threads = True

        def process_request(self, request: Any, client_address: Any) -> None:
            # one thread per connection (the exporter keeps one open; stats polls open others)
            t = threading.Thread(target=self._work, args=(request, client_address), daemon=True)
            t.start()

        def _work(self, request: Any, client_address: Any) -> None:
            try:
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001
                pass
            finally:
                self.shutdown_request(request)

    server = Server(("127.0.0.1", port), Handler)
    sys.stdout.write(f"PORT {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.receiver")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--save", default=None, help="write every request body to this dir")
    ap.add_argument("--ids-prefix", default=None, help="record the arrival time of every id with this prefix")
    args = ap.parse_args(argv)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    try:
        serve(args.port, args.save, args.ids_prefix)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
