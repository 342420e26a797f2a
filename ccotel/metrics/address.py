"""Where ccotel serves /metrics: the one reading of ``--metrics-addr``, and the error of an address
that cannot be bound. Apart from server.py so that a command which only names them (a backfill
catching ``MetricsPortError``, the parsers of run, relay and doctor) does not load http.server.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["DEFAULT_METRICS_ADDR", "MetricsAddress", "MetricsPortError", "metrics_address"]

DEFAULT_METRICS_ADDR = "127.0.0.1:9477"  # ccotel run's: the loopback, off Claude Code's own 9464


@dataclass(frozen=True)
class MetricsAddress:
    """Where /metrics is served: a host (name or address) and a port (0: one the system picks)."""

    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        """The /metrics URL, an IPv6 address in brackets; ``port``: the one bound, if 0 was asked."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}/metrics"


def metrics_address(value: str) -> MetricsAddress | None:
    """An argparse type for ``--metrics-addr``: ``host:port`` (an IPv6 address in brackets, an empty
    host the loopback), or ``none`` (None: not served). Anything else is a usage error."""
    if value == "none":
        return None
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if not sep or not port_text.isascii() or not port_text.isdigit() or (":" in host and not value.startswith("[")):
        raise argparse.ArgumentTypeError(f"not host:port (an IPv6 address in brackets) or 'none': {value!r}")
    port = int(port_text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not from 0 to 65535: {value!r}")
    return MetricsAddress(host or "127.0.0.1", port)


class MetricsPortError(Exception):
    """/metrics cannot be served at the address given (in use, not this host's, not allowed)."""
