"""A real Prometheus for tests, on loopback only, plus ``promtool`` helpers.

Prometheus and promtool come from Debian (``python -m tests.support.install_prometheus``;
bookworm ships 2.42).  :class:`PrometheusServer` writes a scrape config for the
given targets, starts ``prometheus`` on ``127.0.0.1:<free port>`` with a temp
TSDB dir, waits for ``/-/ready`` and answers instant queries over the HTTP API.
It never touches the Debian ``prometheus`` service (0.0.0.0:9090), which the
installer stops and disables.  Standard library only.

    with PrometheusServer(targets=[("127.0.0.1", port)]) as prom:
        prom.wait_for('up{job="ccotel"}', lambda r: r and r[0][1] == 1, timeout=20)
        prom.query("ccotel_turns_total")      # -> [({"__name__": ..., "outcome": ...}, 3.0), ...]
        prom.query_range("rate(ccotel_turns_total[4s])", start, end, step=1)   # -> [(labels, [(t, v), ...])]

``promql_metric_names`` / ``promql_label_names`` read which series and labels a PromQL
expression uses (a small lexer, enough for dashboards and rules), without a server.

Every wait is bounded: ``startup_timeout`` for readiness, ``stop_timeout`` for
SIGTERM before SIGKILL, ``timeout`` on every HTTP call and on :meth:`wait_for`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.support.server import LoopbackServer, free_port

__all__ = [
    "PrometheusError",
    "PrometheusServer",
    "RangeSeries",
    "Sample",
    "installed_versions",
    "missing_reason",
    "promtool",
    "promtool_check_metrics",
    "promql_label_names",
    "promql_metric_names",
]

#: ``[(labels, value), ...]``: an instant vector (a scalar is ``[({}, value)]``).
Sample = tuple[dict[str, str], float]
#: ``(labels, [(unix time, value), ...])``: one series of a range query (NaN values kept as NaN).
RangeSeries = tuple[dict[str, str], list[tuple[float, float]]]

INSTALL_HINT = "run `python -m tests.support.install_prometheus` (apt-get install prometheus)"


class PrometheusError(RuntimeError):
    """Prometheus did not start, answer or stop as expected."""


def _binary(name: str) -> str | None:
    return shutil.which(name)


def _version(binary: str | None) -> str | None:
    """``2.42.0`` from ``<binary> --version`` (first line ``prometheus, version 2.42.0+ds ...``)."""
    if binary is None:
        return None
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    text = (out.stdout or out.stderr).strip()
    parts = text.split()
    if len(parts) >= 3 and parts[1] == "version":
        return parts[2]
    return text.splitlines()[0] if text else None


def installed_versions() -> dict[str, str] | None:
    """``{"prometheus": v, "promtool": v}`` when both run, else None."""
    found = {name: _version(_binary(name)) for name in ("prometheus", "promtool")}
    if all(found.values()):
        return {k: str(v) for k, v in found.items()}
    return None


def missing_reason() -> str | None:
    """None when prometheus and promtool work, else why not (for skip/fail)."""
    if installed_versions() is None:
        return f"prometheus/promtool not installed: {INSTALL_HINT}"
    return None


def promtool(*args: str, input_text: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run ``promtool args...``; return (exit code, stdout + stderr)."""
    binary = _binary("promtool")
    if binary is None:
        raise PrometheusError(f"promtool not found: {INSTALL_HINT}")
    out = subprocess.run(
        [binary, *args],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return out.returncode, (out.stdout or "") + (out.stderr or "")


def promtool_check_metrics(text: str) -> tuple[bool, str]:
    """``promtool check metrics`` on an exposition: (passed, promtool's output).

    promtool 2.42 reads the exposition on stdin, exits 1 on a parse error and 3 on
    a lint problem (e.g. a counter without ``_total``), and prints the problems.
    """
    code, output = promtool("check", "metrics", input_text=text)
    return code == 0, output


def _parse_result(data: dict[str, Any]) -> list[Sample]:
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "vector":
        return [(dict(item["metric"]), float(item["value"][1])) for item in result]
    if kind == "scalar":
        return [({}, float(result[1]))]
    if kind == "matrix":
        raise PrometheusError("query() is for instant queries; got a matrix (range selector?)")
    return [({}, float("nan"))] if kind == "string" else []


class PrometheusServer(LoopbackServer):
    """``prometheus`` on 127.0.0.1, a free port and a temp TSDB dir.

    ``targets``: ``(host, port)`` pairs scraped as one job (``job``, default
    ``"ccotel"``) every ``scrape_interval``.  ``rule_files``: rule files to load
    (evaluated every ``scrape_interval`` too).  Ready in ~0.1 s; the first scrape
    comes ~5 s later (2.42 syncs scrape targets on a fixed 5 s tick), so wait
    with :meth:`wait_for`.
    """

    name = "prometheus"
    error = PrometheusError

    def __init__(
        self,
        targets: Iterable[tuple[str, int]] = (),
        scrape_interval: str = "1s",
        *,
        job: str = "ccotel",
        rule_files: Sequence[os.PathLike[str] | str] = (),
        startup_timeout: float = 60.0,
        stop_timeout: float = 15.0,
        keep_dir: bool = False,
    ) -> None:
        super().__init__(startup_timeout=startup_timeout, stop_timeout=stop_timeout, keep_dir=keep_dir)
        self.scrape_targets = [(str(h), int(p)) for h, p in targets]
        self.scrape_interval = scrape_interval
        self.job = job
        self.rule_files = [Path(f).resolve() for f in rule_files]
        self.port = 0
        self.config_path: Path | None = None
        self._binary: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def config_text(self) -> str:
        """The prometheus.yml written (JSON is valid YAML)."""
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "static_configs": [{"targets": [f"{h}:{p}" for h, p in self.scrape_targets]}],
                }
            ],
        }
        if self.rule_files:
            config["rule_files"] = [str(f) for f in self.rule_files]
        return json.dumps(config, indent=2) + "\n"

    # -- LoopbackServer ------------------------------------------------------

    def _check(self) -> None:
        self._binary = _binary("prometheus")
        if self._binary is None:
            raise PrometheusError(f"prometheus not found: {INSTALL_HINT}")

    def _prepare(self) -> None:
        assert self.tmpdir is not None
        self.config_path = self.tmpdir / "prometheus.yml"
        self.config_path.write_text(self.config_text())

    def _pick_ports(self) -> None:
        self.port = free_port(self.host)

    def _command(self, attempt: int) -> list[str]:
        assert self._binary is not None and self.tmpdir is not None
        return [
            self._binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tmpdir / f'data-{attempt}'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--log.level=info",
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._exited()
            try:
                with urllib.request.urlopen(f"{self.base_url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise self._not_ready()

    # -- HTTP API ----------------------------------------------------------

    def api(self, path: str, params: dict[str, str] | None = None, timeout: float = 10) -> Any:
        """GET ``/api/v1/<path>``; return ``data`` or raise with Prometheus' error."""
        url = f"{self.base_url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as err:
            try:
                body = json.load(err)
            except ValueError:
                raise PrometheusError(f"GET {url}: HTTP {err.code}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """Instant query: ``[(labels, value), ...]``; a scalar is ``[({}, value)]``."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return _parse_result(self.api("query", params))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """Range query (what a Grafana time series panel sends): one entry per series."""
        data = self.api("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                        "step": f"{step:g}"})
        if data.get("resultType") != "matrix":
            raise PrometheusError(f"query_range {expr!r}: resultType {data.get('resultType')!r}, not matrix")
        return [(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
                for item in data["result"]]

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[list[Sample]], Any],
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> list[Sample]:
        """Poll ``query(expr)`` until ``predicate(result)`` is true; return that result."""
        deadline = time.monotonic() + timeout
        last: list[Sample] = []
        while True:
            last = self.query(expr)
            if predicate(last):
                return last
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{expr!r}: predicate still false after {timeout}s; last result {last!r}")
            time.sleep(interval)

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets (``scrapeUrl``, ``health`` up/down/unknown, ``lastError``, ``labels``...)."""
        return list(self.api("targets", {"state": "active"})["activeTargets"])

    def rules(self) -> list[dict[str, Any]]:
        """Loaded rule groups (``name``, ``rules`` with ``name``, ``query``, ``type``...)."""
        return list(self.api("rules")["groups"])


# -- PromQL names, without a server ------------------------------------------------------------

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "atan2", "inf", "nan",
}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def promql_metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (Grafana variables are ignored)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\boffset\s+\S+", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", text):
        word, call = match.groups()
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def promql_label_names(expr: str) -> set[str]:
    """Label names used in grouping clauses (by, on, ...) and label matchers."""
    text = _STRING.sub('""', expr)
    found: set[str] = set()
    for _, inner in _GROUPING.findall(text):
        found.update(x.strip() for x in inner.split(",") if x.strip())
    for inner in re.findall(r"\{([^}]*)\}", text):
        found.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", inner))
    return found
