"""dashboards/: the Prometheus rules pass promtool (check + unit tests), and the Grafana
dashboard is importable JSON whose queries use only the metrics ccotel promises
(docs/metrics.md) and parse in a real Prometheus.

The JSON checks need nothing installed; the promtool / Prometheus ones follow the
policy of tests/support/fixtures.py (skip locally, fail under CI).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.fixtures import missing_component  # noqa: E402
from tests.support.prometheus import PrometheusServer, missing_reason, promtool  # noqa: E402

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
ALERTS = DASHBOARDS / "ccotel-alerts.yml"
RULE_TESTS = DASHBOARDS / "ccotel-rules.test.yml"
GRAFANA = DASHBOARDS / "ccotel-grafana.json"

#: The metrics contract: name -> (type, label names).
CONTRACT: dict[str, tuple[str, frozenset[str]]] = {
    name: (kind, frozenset(labels.split()))
    for name, kind, labels in [
        ("ccotel_session_resets_total", "counter", "reason source"),
        ("ccotel_aborts_total", "counter", "reason source"),
        ("ccotel_watchdog_kills_total", "counter", "source"),
        ("ccotel_stalled_turns_total", "counter", "outcome"),
        ("ccotel_killed_turns_total", "counter", ""),
        ("ccotel_orphaned_tool_uses_total", "counter", "tool"),
        ("ccotel_turns_total", "counter", "outcome"),
        ("ccotel_user_interrupts_total", "counter", ""),
        ("ccotel_api_calls_total", "counter", "model"),
        ("ccotel_api_errors_total", "counter", "type"),
        ("ccotel_tool_calls_total", "counter", "tool outcome"),
        ("ccotel_tool_duration_seconds", "histogram", "tool"),
        ("ccotel_tokens_total", "counter", "model type"),
        ("ccotel_cost_usd_total", "counter", "model"),
        ("ccotel_subagents_total", "counter", "type"),
        ("ccotel_compactions_total", "counter", "trigger"),
        ("ccotel_lines_read_total", "counter", ""),
        ("ccotel_bytes_read_total", "counter", ""),
        ("ccotel_parse_errors_total", "counter", "reason"),
        ("ccotel_spans_exported_total", "counter", ""),
        ("ccotel_export_failures_total", "counter", ""),
        ("ccotel_ingest_lag_seconds", "gauge", ""),
        ("ccotel_export_queue_spans", "gauge", ""),
        ("ccotel_files_watched", "gauge", ""),
        ("ccotel_last_export_success_timestamp_seconds", "gauge", ""),
        ("ccotel_build_info", "gauge", "version"),
    ]
}
#: Series names a query may use: the contract (histograms as _bucket/_sum/_count) and `up`.
ALLOWED_SERIES = {"up"} | {
    series
    for name, (kind, _) in CONTRACT.items()
    for series in ([f"{name}_bucket", f"{name}_sum", f"{name}_count"] if kind == "histogram" else [name])
}
#: Label names a query may group or match on: the contract's, plus le, job and instance.
ALLOWED_LABELS = {"le", "job", "instance"}.union(*(labels for _, labels in CONTRACT.values()))

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "atan2", "inf", "nan",
}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (a small lexer, enough for our queries)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # string literals
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)             # Grafana variables
    text = _GROUPING.sub(" ", text)                           # by (...), on (...)
    text = re.sub(r"\{[^}]*\}", " ", text)                    # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                   # ranges, subqueries
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", text):
        word, call = match.groups()
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def label_names(expr: str) -> set[str]:
    """Label names used in grouping clauses and label matchers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    found: set[str] = set()
    for _, inner in _GROUPING.findall(text):
        found.update(x.strip() for x in inner.split(",") if x.strip())
    for inner in re.findall(r"\{([^}]*)\}", text):
        found.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", inner))
    return found


def test_metric_names_lexer() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (tool, le) (rate(ccotel_tool_duration_seconds_bucket'
        '{instance=~"$instance", tool!="a{b}"}[$__rate_interval]))) '
        '+ on (job) group_left (version) ccotel_build_info offset 1h '
        'or time() - ccotel_last_export_success_timestamp_seconds > bool 1e3'
    )
    assert metric_names(expr) == {
        "ccotel_tool_duration_seconds_bucket",
        "ccotel_build_info",
        "ccotel_last_export_success_timestamp_seconds",
    }
    assert label_names(expr) == {"tool", "le", "job", "version", "instance"}


# ---- Grafana dashboard (no Prometheus needed) ------------------------------------------


def load_dashboard() -> dict[str, Any]:
    return json.loads(GRAFANA.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title / variable name, expr) for every query in the dashboard."""
    board = load_dashboard()
    exprs = [
        (panel["title"], target["expr"])
        for panel in all_panels(board["panels"])
        for target in panel.get("targets", [])
    ]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            inner = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
            assert inner, query
            exprs.append((f"${var['name']}", inner.group(1)))
    return exprs


def test_dashboard_is_importable_grafana_json() -> None:
    board = load_dashboard()
    assert board["uid"] == "ccotel" and board["title"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    assert variables["instance"]["datasource"] == datasource
    panels = list(all_panels(board["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert panel["datasource"] == datasource, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel.get("description"), panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == datasource, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_dashboard_uses_only_contract_metrics_and_labels() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 30
    for where, expr in exprs:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= ALLOWED_SERIES, f"{where}: not in the contract: {names - ALLOWED_SERIES}"
        labels = label_names(expr)
        assert labels <= ALLOWED_LABELS, f"{where}: unknown labels {labels - ALLOWED_LABELS}"


def test_dashboard_shows_every_contract_metric() -> None:
    used = set().union(*(metric_names(expr) for _, expr in dashboard_exprs()))
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("ccotel_tool_duration") else n for n in used}
    assert set(CONTRACT) - shown == set()
    assert "up" in used


# ---- promtool and a real Prometheus ----------------------------------------------------


@pytest.fixture(scope="module")
def prometheus_installed() -> None:
    reason = missing_reason()
    if reason:
        missing_component(reason)


def test_promtool_check_rules(prometheus_installed: None) -> None:
    code, output = promtool("check", "rules", str(ALERTS))
    assert code == 0, output
    assert "SUCCESS: 8 rules found" in output


def test_promtool_test_rules(prometheus_installed: None) -> None:
    code, output = promtool("test", "rules", str(RULE_TESTS), timeout=120)
    assert code == 0, output
    assert "SUCCESS" in output


def test_rule_tests_cover_every_alert() -> None:
    """Every alert is tested firing (with labels/annotations) and not firing."""
    alerts = set(re.findall(r"^\s*- alert: (\w+)$", ALERTS.read_text(), re.M))
    assert len(alerts) == 7
    tests = RULE_TESTS.read_text()
    for alert in alerts:
        block = re.findall(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels:", tests)
        assert block, f"{alert}: no test where it fires"
        assert f"alertname: {alert}, exp_alerts: []" in tests, f"{alert}: no test where it does not fire"


@pytest.fixture(scope="module")
def prom_with_rules(prometheus_installed: None) -> Iterator[PrometheusServer]:
    with PrometheusServer(targets=[], rule_files=[ALERTS]) as server:
        yield server


def test_prometheus_loads_the_rules_and_they_use_only_contract_metrics(
    prom_with_rules: PrometheusServer,
) -> None:
    groups = {g["name"]: g for g in prom_with_rules.rules()}
    assert set(groups) == {"ccotel.recording", "ccotel.alerts"}
    rules = [r for g in groups.values() for r in g["rules"]]
    assert sorted(r["name"] for r in rules if r["type"] == "alerting") == [
        "CcotelAbsent",
        "CcotelDown",
        "CcotelExportFailing",
        "CcotelIngestLagging",
        "CcotelMissingTranscriptResets",
        "CcotelOrphanedToolUses",
        "CcotelWatchdogKill",
    ]
    for rule in rules:
        assert rule["health"] != "err", rule
        names = metric_names(rule["query"])
        assert names and names <= ALLOWED_SERIES, (rule["name"], names - ALLOWED_SERIES)
        if rule["type"] == "alerting":
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["name"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["name"]


def test_dashboard_queries_parse_in_prometheus(prom_with_rules: PrometheusServer) -> None:
    """Each panel query, with Grafana's variables filled in, is valid PromQL for Prometheus."""
    for where, expr in dashboard_exprs():
        concrete = (
            expr.replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$instance", ".*")
        )
        assert "$" not in concrete, (where, concrete)
        prom_with_rules.query(concrete)  # raises PrometheusError on a bad query
