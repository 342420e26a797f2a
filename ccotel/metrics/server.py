"""Metrics stage: Prometheus /metrics over HTTP, for ccotel run and the relay.

The exposition (text and OpenMetrics, gzip, ``name[]`` filters) is prometheus_client's WSGI app;
the server around it is ccotel's. prometheus_client's own (``start_http_server``) starts a thread
per connection and waits for a silent client without end, so every idle connection held a thread
and its memory for as long as ccotel ran (tests/metrics/test_server.py). This one holds at most
``MAX_CONNECTIONS`` at once, closing the oldest to make room for a new one (idle holders never lock
a scrape out), and drops a connection that says nothing for ``IDLE_TIMEOUT_S``.

``--metrics-addr`` is read in address.py; a port that cannot be bound is a ``MetricsPortError``
(address.py), said before any work.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ccotel.metrics.address import MetricsAddress, MetricsPortError

if TYPE_CHECKING:
    from ccotel.metrics.counters import Metrics

__all__ = ["IDLE_TIMEOUT_S", "MAX_CONNECTIONS", "MetricsServer", "serve"]

# A Prometheus server scrapes a target one request at a time; a few servers (HA pairs) and a
# person with curl stay well under this.
MAX_CONNECTIONS = 8
# A scrape sends its request at once and ccotel answers in milliseconds; a connection silent this
# long is not a scrape (Prometheus's default scrape timeout is 10 s too).
IDLE_TIMEOUT_S = 10.0

log = logging.getLogger("ccotel.metrics")


class _Handler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler puts it on the connection's socket

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass  # an access log of scrapes is not ccotel's to write


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``max_connections`` of them: a new one closes the oldest."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 max_connections: int = MAX_CONNECTIONS, on_evict: Callable[[], None] | None = None) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.evicted = 0  # connections closed to make room
        self._on_evict = on_evict  # counts each (ccotel_metrics_connections_evicted_total)
        self._held: dict[socket.socket, None] = {}  # open connections, oldest first
        self._held_lock = threading.Lock()
        super().__init__(address, _Handler)

    def open_connections(self) -> int:
        with self._held_lock:
            return len(self._held)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._held_lock:
            while len(self._held) >= self.max_connections:
                oldest = next(iter(self._held))
                del self._held[oldest]
                self.evicted += 1
                if self._on_evict is not None:
                    self._on_evict()
                if self.evicted == 1:
                    log.warning("more than %d connections to /metrics at once: the oldest are closed to let new "
                                "ones in", self.max_connections)
                _wake(oldest)
            self._held[request] = None
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._held_lock:
            self._held.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away, timed out or was closed to make room: nothing to act on, and
        # socketserver's default prints a traceback on stderr.
        log.debug("a /metrics connection ended in an error: %r", sys.exc_info()[1])


def _wake(sock: socket.socket) -> None:
    """End what the connection's thread waits for (a read or a write) at once: it then closes it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already gone


def serve(metrics: Metrics, address: MetricsAddress) -> MetricsServer:
    """Serve /metrics at ``address`` from a daemon thread, and say where; MetricsPortError if the
    address cannot be bound."""
    from prometheus_client import make_wsgi_app

    from ccotel.metrics import events
    from ccotel.metrics.counters import registry_for

    where = f"{address.host}:{address.port}"
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        server = MetricsServer((str(sockaddr[0]), int(sockaddr[1])), family,
                               on_evict=lambda: events.metrics_connection_evicted(metrics))
    except OSError as exc:  # (socket.gaierror is one)
        raise MetricsPortError(f"cannot serve /metrics on {where}: {exc.strerror or exc} (--metrics-addr "
                               "HOST:PORT with an address of this host and a free port; 127.0.0.1:0 takes any "
                               "free port, none serves no metrics)") from None
    server.set_app(make_wsgi_app(registry_for(metrics)))
    threading.Thread(target=server.serve_forever, name="ccotel-metrics", daemon=True).start()
    log.info("metrics on %s", address.url(server.server_port))
    return server
