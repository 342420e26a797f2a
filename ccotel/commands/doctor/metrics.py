"""The metrics port check: whether ccotel run can serve /metrics on its --metrics-addr, or what
already listens there (a ccotel, Claude Code's own exporter, something else), asked over HTTP.
"""

from __future__ import annotations

import argparse
import errno
import http.client
import ipaddress
import socket
from collections.abc import Mapping, Sequence

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, Level
from ccotel.metrics.address import DEFAULT_METRICS_ADDR, metrics_address

__all__ = ["check_metrics", "is_loopback", "CLAUDE_CODE_PROMETHEUS_PORT"]

#: The OpenTelemetry Prometheus exporter's default port, which Claude Code's metrics use.
CLAUDE_CODE_PROMETHEUS_PORT = 9464


def check_metrics(cfg: DoctorConfig, claude_code_ports: Mapping[int, Sequence[str]]) -> list[Finding]:
    addr = cfg.metrics_addr or "none"
    try:  # as ccotel run reads it
        address = metrics_address(addr)
    except argparse.ArgumentTypeError as exc:
        return [Finding("metrics", Level.FAIL, addr, str(exc), f"--metrics-addr {DEFAULT_METRICS_ADDR}")]
    if address is None:
        return [Finding("metrics", Level.OK, "--metrics-addr none", "metrics are not served")]
    host, port = address.host, address.port
    out = []
    if not is_loopback(host):
        out.append(Finding("metrics", Level.WARN, addr, f"binds {host}: anyone who can reach it reads /metrics "
                           "(ccotel binds the loopback by default)", "--metrics-addr 127.0.0.1:" + str(port) +
                           " and scrape it from this host, unless exposing it is meant"))
    if port in claude_code_ports:
        out.append(Finding("metrics", Level.FAIL, addr, f"Claude Code's own Prometheus exporter listens on port {port} "
                           f"too ({', '.join(claude_code_ports[port])}): whichever starts second cannot serve",
                           f"--metrics-addr {DEFAULT_METRICS_ADDR} (ccotel's default), or move Claude Code's with "
                           "OTEL_EXPORTER_PROMETHEUS_PORT"))
    elif port == CLAUDE_CODE_PROMETHEUS_PORT:
        out.append(Finding("metrics", Level.WARN, addr, f"{port} is the port Claude Code's own Prometheus exporter "
                           "takes when its telemetry is turned on (OTEL_METRICS_EXPORTER=prometheus)",
                           f"--metrics-addr {DEFAULT_METRICS_ADDR} (ccotel's default)"))
    out.append(_port_finding(addr, host, port, cfg.timeout_s))
    return out


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_finding(addr: str, host: str, port: int, timeout_s: float) -> Finding:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return Finding("metrics", Level.FAIL, addr, f"cannot resolve {host} ({exc})",
                       f"--metrics-addr {DEFAULT_METRICS_ADDR}")
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # As the HTTP server ccotel starts (prometheus_client): SO_REUSEADDR, so a port in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return Finding("metrics", Level.FAIL, addr, f"ccotel run cannot listen there ({exc.strerror or exc})",
                               "--metrics-addr with an address of this host and a port above 1023 "
                               f"({DEFAULT_METRICS_ADDR} is the default)")
        else:
            return Finding("metrics", Level.OK, addr, "free: ccotel run can serve /metrics there")
    who = _who_serves(host, port, timeout_s)
    if who.startswith("ccotel"):
        return Finding("metrics", Level.OK, addr, f"already served by a running {who}", "",
                       {"in_use_by": "ccotel"})
    return Finding("metrics", Level.FAIL, addr, f"in use by {who}: ccotel run could not serve /metrics there",
                   f"stop it, or give ccotel another --metrics-addr ({DEFAULT_METRICS_ADDR} is the default)",
                   {"in_use_by": who})


def _who_serves(host: str, port: int, timeout_s: float) -> str:
    """What answers GET /metrics on a port in use: ccotel (its build info), Claude Code, or something else."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    conn = http.client.HTTPConnection(target, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read(1 << 20).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return f"something that does not answer HTTP ({type(exc).__name__})"
    finally:
        conn.close()
    for line in body.splitlines():
        if line.startswith("ccotel_build_info{"):
            version = line.partition('version="')[2].partition('"')[0]
            return f"ccotel {version}".strip()
    if "claude_code_" in body:
        return "Claude Code's own Prometheus exporter"
    return f"another HTTP server (GET /metrics: {resp.status}, no ccotel_build_info)"
