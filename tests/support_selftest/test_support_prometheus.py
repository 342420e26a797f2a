"""The Prometheus test support: a real prometheus scrapes a real prometheus_client exposition.

A tiny prometheus_client HTTP server on 127.0.0.1 (a fresh ``CollectorRegistry``,
never the global one) exposes a counter; :class:`PrometheusServer` scrapes it every
second and the instant query returns its value, with the job/instance labels we
configured.  A second target with nothing listening is reported down.  Plus
``promtool check metrics`` on good and bad expositions.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402
from prometheus_client.exposition import start_http_server  # noqa: E402

from tests.support.fixtures import missing_component  # noqa: E402
from tests.support.prometheus import (  # noqa: E402
    PrometheusError,
    PrometheusServer,
    missing_reason,
    promtool_check_metrics,
)


@pytest.fixture(scope="module")
def prometheus_installed() -> None:
    reason = missing_reason()
    if reason:
        missing_component(reason)


@pytest.fixture(scope="module")
def exporter() -> Iterator[tuple[int, Counter]]:
    """prometheus_client on 127.0.0.1:<free port> with its own registry."""
    registry = CollectorRegistry()
    things = Counter("ccotel_test_things", "Things counted by the test.", ["kind"], registry=registry)
    things.labels(kind="a").inc(3)
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield httpd.server_port, things
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _dead_port() -> int:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def prom(prometheus_installed: None, exporter: tuple[int, Counter]) -> Iterator[PrometheusServer]:
    port, _ = exporter
    with PrometheusServer(targets=[("127.0.0.1", port), ("127.0.0.1", _dead_port())]) as server:
        yield server


def test_scrapes_the_counter_and_follows_it(prom: PrometheusServer, exporter: tuple[int, Counter]) -> None:
    port, things = exporter
    instance = f"127.0.0.1:{port}"
    result = prom.wait_for("ccotel_test_things_total", lambda r: len(r) == 1, timeout=30)
    assert result == [
        (
            {"__name__": "ccotel_test_things_total", "job": "ccotel", "instance": instance, "kind": "a"},
            3.0,
        )
    ]
    things.labels(kind="a").inc(2)
    things.labels(kind="b").inc()
    result = prom.wait_for(
        "sum by (kind) (ccotel_test_things_total)",
        lambda r: sorted(r, key=lambda s: s[0]["kind"]) == [({"kind": "a"}, 5.0), ({"kind": "b"}, 1.0)],
        timeout=30,
    )
    assert prom.query("scalar(sum(ccotel_test_things_total))") == [({}, 6.0)]


def test_targets_and_up(prom: PrometheusServer, exporter: tuple[int, Counter]) -> None:
    port, _ = exporter
    live = f"127.0.0.1:{port}"
    prom.wait_for('up{job="ccotel"}', lambda r: len(r) == 2, timeout=30)
    ups = {labels["instance"]: value for labels, value in prom.query('up{job="ccotel"}')}
    assert ups.pop(live) == 1.0
    assert list(ups.values()) == [0.0]
    targets = {t["labels"]["instance"]: t for t in prom.targets()}
    assert set(targets) == {live, *ups}
    assert targets[live]["health"] == "up"
    assert targets[live]["scrapeUrl"] == f"http://{live}/metrics"
    (dead,) = ups
    assert targets[dead]["health"] == "down"
    assert "connection refused" in targets[dead]["lastError"]


def test_listens_on_loopback_only(prom: PrometheusServer) -> None:
    assert prom.base_url.startswith("http://127.0.0.1:")
    flags = prom.api("status/flags")
    assert flags["web.listen-address"] == f"127.0.0.1:{prom.port}"
    assert flags["storage.tsdb.path"].startswith(str(prom.tmpdir))


def test_bad_query_raises(prom: PrometheusServer) -> None:
    with pytest.raises(PrometheusError, match="bad_data"):
        prom.query("sum by (")
    with pytest.raises(TimeoutError):
        prom.wait_for("absent_metric_xyz", bool, timeout=0.5)


def test_promtool_check_metrics(prometheus_installed: None) -> None:
    registry = CollectorRegistry()
    Counter("ccotel_x", "A counter.", ["reason"], registry=registry).labels(reason="r").inc()
    Gauge("ccotel_y_seconds", "A gauge.", registry=registry).set(1.5)
    Histogram("ccotel_z_seconds", "A histogram.", ["tool"], registry=registry).labels(tool="Bash").observe(0.2)
    ok, output = promtool_check_metrics(generate_latest(registry).decode())
    assert ok, output

    ok, output = promtool_check_metrics("# HELP bad A counter.\n# TYPE bad counter\nbad 1\n")
    assert not ok
    assert 'counter metrics should have "_total" suffix' in output

    ok, output = promtool_check_metrics("bad{ 1\n")
    assert not ok
    assert "parsing error" in output
