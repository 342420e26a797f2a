"""The /metrics server (ccotel/metrics/server.py): bounded in threads and connections, a scrape
never locked out, and ``--metrics-addr`` read one way, its faults said before any work.

prometheus_client's start_http_server, which ccotel used until this test, held a thread per
connection for as long as the client stayed silent: 3,000 idle connections to ``ccotel run`` held
3,000 threads and 80 MB more. The connections here are real, on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccotel.cli import EXIT_USAGE
from ccotel.metrics import server as metrics_server
from ccotel.metrics.address import MetricsAddress, metrics_address
from ccotel.metrics.counters import Metrics
from ccotel.metrics.server import MAX_CONNECTIONS, MetricsServer, serve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def served() -> Iterator[MetricsServer]:
    server = serve(Metrics(), MetricsAddress("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _scrape(server: MetricsServer) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        return str(resp.read().decode())


def _until(check: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.02)
    return False


def test_idle_connections_hold_a_bounded_number_of_threads_and_a_scrape_still_answers(
        served: MetricsServer, capfd: pytest.CaptureFixture[str]) -> None:
    before = threading.active_count()
    held = []
    try:
        for _ in range(20 * MAX_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", served.server_port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request begun and never finished
            held.append(sock)
        assert _until(lambda: served.evicted >= 19 * MAX_CONNECTIONS)
        assert served.open_connections() <= MAX_CONNECTIONS
        assert _until(lambda: threading.active_count() - before <= MAX_CONNECTIONS)
        text = _scrape(served)  # closes the oldest idle holder to get in
        assert "ccotel_build_info" in text
        # each eviction is counted (the scrape's own included, once it lands: scraped again)
        assert _until(lambda: f"ccotel_metrics_connections_evicted_total {float(served.evicted)}" in _scrape(served))
        # the holders closed to make room were told so: their connection ends
        held[0].settimeout(5)
        assert held[0].recv(1024) == b""
    finally:
        for sock in held:
            sock.close()
    assert _until(lambda: served.open_connections() == 0)
    assert "Traceback" not in capfd.readouterr().err  # socketserver's default prints one per ended connection


def test_a_silent_connection_is_closed_after_the_idle_timeout(served: MetricsServer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_server._Handler, "timeout", 0.3)
    with socket.create_connection(("127.0.0.1", served.server_port), timeout=5) as sock:
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server, not by the 5 s of the client
        assert time.monotonic() - started < 4
    assert _until(lambda: served.open_connections() == 0)
    assert "ccotel_build_info" in _scrape(served)


@pytest.mark.parametrize(("text", "want"), [
    ("none", None),
    ("127.0.0.1:9477", MetricsAddress("127.0.0.1", 9477)),
    ("0.0.0.0:0", MetricsAddress("0.0.0.0", 0)),
    (":9477", MetricsAddress("127.0.0.1", 9477)),
    ("[::1]:9477", MetricsAddress("::1", 9477)),
    ("localhost:65535", MetricsAddress("localhost", 65535)),
])
def test_metrics_address_reads(text: str, want: MetricsAddress | None) -> None:
    assert metrics_address(text) == want


@pytest.mark.parametrize("text", ["foo", "9477", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536",
                                  "127.0.0.1:-1", "127.0.0.1:+80", "::1:9477", "[::1]", "127.0.0.1:９４７７"])
def test_metrics_address_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        metrics_address(text)


def test_url_brackets_ipv6_and_names_the_bound_port() -> None:
    assert MetricsAddress("::1", 0).url(41234) == "http://[::1]:41234/metrics"
    assert MetricsAddress("127.0.0.1", 9477).url() == "http://127.0.0.1:9477/metrics"


def _ccotel(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "root"
    (root / "projects").mkdir(parents=True, exist_ok=True)
    # the relay passes its stdin on to stdout: what it relayed shows there
    return subprocess.run([sys.executable, "-m", "ccotel", *args, "--root", str(root)], cwd=REPO, text=True,
                          capture_output=True, timeout=60, input='{"type":"system","subtype":"init"}\n')


@pytest.mark.parametrize("command", [["run", "--state", "none", "--traces-exporter", "none", "--no-status"],
                                     ["relay", "--traces-exporter", "none"]])
def test_bad_or_taken_address_is_exit_2_before_any_work(tmp_path: Path, command: list[str]) -> None:
    for bad in ("foo", "127.0.0.1:99999"):
        proc = _ccotel(tmp_path, *command, "--metrics-addr", bad)
        assert proc.returncode == EXIT_USAGE, proc.stderr
        assert "--metrics-addr" in proc.stderr and "Traceback" not in proc.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = _ccotel(tmp_path, *command, "--metrics-addr", f"127.0.0.1:{taken.getsockname()[1]}")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "cannot serve /metrics on 127.0.0.1:" in proc.stderr and "Traceback" not in proc.stderr
    assert "caught up" not in proc.stderr and proc.stdout == ""
    if command[0] == "relay":  # the same relay, served, relays (ccotel run's case: the test below)
        ok = _ccotel(tmp_path, *command, "--metrics-addr", "127.0.0.1:0")
        assert ok.returncode == 0 and ok.stdout == '{"type":"system","subtype":"init"}\n', ok.stderr


def test_run_serves_on_the_port_it_names(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "projects").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state", "none",
                             "--traces-exporter", "none", "--no-status", "--metrics-addr", "127.0.0.1:0"],
                            cwd=REPO, text=True, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        url = ""
        for _ in range(50):  # bounded: a line a read, the log's first few name the port
            line = proc.stderr.readline()
            if "metrics on http://127.0.0.1:" in line:
                url = line.split("metrics on ", 1)[1].strip()
                break
        assert url and not url.endswith(":0/metrics")
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert b"ccotel_build_info" in resp.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
