"""Builds the Grafana dashboards in this folder: ``python dashboards/generate.py`` (``--check``: only compare).

Three dashboards, one JSON file each, importable as they are (Dashboards > New > Import):

- ``ccotel-operations.json``: what went wrong with Claude Code sessions (resets, aborts, watchdog kills,
  stalls, killed turns, orphaned tool calls, the missing-transcript rate against its alert threshold);
- ``ccotel-usage.json``: tokens, cost (estimate, Claude Code's own figure, drift, unpriced calls), API
  calls and errors, tool calls and latency, subagents, compactions;
- ``ccotel-health.json``: ccotel itself (up, version, ingest lag, export queue, spans exported and
  dropped, export failures, checkpoint errors, parse errors, format drift, files watched).

The JSON files are generated, not edited by hand: one place builds every query, trace link and panel,
and ``tests/deploy/test_dashboards.py`` checks that the committed files equal what this script writes. The
alert threshold drawn on the missing-transcript panel is read from ``ccotel-alerts.yml``.

Counting events of rare kinds: Prometheus' ``increase()`` cannot see the first event of a label set
(the series is born at 1, with nothing before it to compare). ccotel exposes every series it has,
with totals kept across restarts, so a series that was absent while ccotel was being scraped W ago
had the value 0 then: its whole value happened within W. ``events()`` adds those series to the
increase, and only when ccotel was scraped at the start of the window (``up{job="ccotel"} offset W``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 42  # Grafana 12.x/13.x (the dashboard schema of @grafana/schema 13.2)
JOB = 'job="ccotel"'  # the scrape job the alert rules and the birth guard expect
INSTANCE = 'instance=~"$instance"'
PROM = {"type": "prometheus", "uid": "${datasource}"}
FILES = {"operations": "ccotel-operations.json", "usage": "ccotel-usage.json", "health": "ccotel-health.json"}


def alert_threshold(alerts: Path = HERE / "ccotel-alerts.yml") -> float:
    """The per-hour threshold of CcotelMissingTranscriptResets (``... * 3600 > N``)."""
    text = alerts.read_text()
    block = text.split("- alert: CcotelMissingTranscriptResets", 1)[1].split("- alert:", 1)[0]
    match = re.search(r"\*\s*3600\s*>\s*([0-9.]+)", block)
    if match is None:
        raise SystemExit("ccotel-alerts.yml: no '* 3600 > N' in CcotelMissingTranscriptResets")
    return float(match.group(1))


# ---- PromQL ------------------------------------------------------------------------------------


def sel(metric: str, *matchers: str) -> str:
    return f"{metric}{{{', '.join((INSTANCE, *matchers))}}}"


def events(metric: str, by: Sequence[str], window: str, *matchers: str) -> str:
    """Events of a counter within ``window``, by labels, counting the first event of a new label set."""
    s = sel(metric, *matchers)
    born = f"(({s} unless {s} offset {window}) and on (job, instance) (up{{{JOB}}} offset {window} == 1)) * 1"
    grouping = f"sum by ({', '.join(by)}) " if by else "sum "
    return f"{grouping}({born} or increase({s}[{window}]))"


def per_minute(metric: str, by: Sequence[str], *matchers: str) -> str:
    grouping = f"sum by ({', '.join(by)}) " if by else "sum "
    return f"{grouping}(rate({sel(metric, *matchers)}[$__rate_interval])) * 60"


# ---- trace links -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFilter:
    """Span attributes to match (``value`` None: any), rendered as TraceQL and as Jaeger tags.

    Values are Python values: str (a label placeholder like ``${__field.labels.tool}`` is a str),
    bool or int. ``error`` asks for spans with status ERROR.
    """

    title: str
    attrs: tuple[tuple[str, str | bool | int], ...] = ()
    error: bool = False

    def traceql(self) -> str:
        conds = ['resource.service.name = "${service}"']
        for key, value in self.attrs:
            conds.append(f"span.{key} = {_traceql_literal(value)}")
        if self.error:
            conds.append("status = error")
        return "{ " + " && ".join(conds) + " } | select(span.session.id)"

    def jaeger_tags(self) -> str:
        tags = [f"{key}={_jaeger_value(value)}" for key, value in self.attrs]
        if self.error:
            tags.append("error=true")
        return " ".join(tags)


def _traceql_literal(value: str | bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


def _jaeger_value(value: str | bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_PLACEHOLDER = re.compile(r"\$\{[^}]+\}")


def _encode_keeping_placeholders(text: str) -> str:
    """Percent-encode everything but ``${...}``: Grafana fills those in (and percent-encodes label values
    itself, since Grafana 10) before the browser follows the link."""
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(text):
        out.append(urllib.parse.quote(text[pos:m.start()], safe=""))
        out.append(m.group(0))
        pos = m.end()
    out.append(urllib.parse.quote(text[pos:], safe=""))
    return "".join(out)


def explore_url(pane: dict[str, Any]) -> str:
    panes = json.dumps({"traces": pane}, separators=(",", ":"))
    return "/explore?schemaVersion=1&panes=" + _encode_keeping_placeholders(panes)


def tempo_pane(f: TraceFilter) -> dict[str, Any]:
    return {
        "datasource": "${tempo}",
        "queries": [{"refId": "A", "datasource": {"type": "tempo", "uid": "${tempo}"}, "queryType": "traceql",
                     "query": f.traceql(), "limit": 50, "tableType": "traces"}],
        "range": {"from": "${__from}", "to": "${__to}"},
    }


def jaeger_pane(f: TraceFilter) -> dict[str, Any]:
    query: dict[str, Any] = {"refId": "A", "datasource": {"type": "jaeger", "uid": "${jaeger}"},
                             "queryType": "search", "service": "${service}", "limit": 50}
    tags = f.jaeger_tags()
    if tags:
        query["tags"] = tags
    return {"datasource": "${jaeger}", "queries": [query], "range": {"from": "${__from}", "to": "${__to}"}}


def trace_links(filters: Iterable[TraceFilter]) -> list[dict[str, Any]]:
    links = []
    for f in filters:
        links.append({"title": f"Tempo: {f.title}", "url": explore_url(tempo_pane(f)), "targetBlank": True})
        links.append({"title": f"Jaeger: {f.title}", "url": explore_url(jaeger_pane(f)), "targetBlank": True})
    return links


LABEL = "${__field.labels.%s}"
TURN = ("gen_ai.agent.name", "claude-code")  # the root span of a turn
ALL_TRACES = TraceFilter("all ccotel traces in this time range")


# ---- panels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    kind: str  # timeseries | stat | table | row
    title: str
    description: str = ""
    targets: list[Target] = field(default_factory=list)
    unit: str = "short"
    width: int = 8
    height: int = 8
    links: list[TraceFilter] = field(default_factory=list)
    threshold: float | None = None  # drawn as a red line (timeseries) or turns a stat red
    stat_color_from: float | None = None  # a stat turns red from this value
    extra: dict[str, Any] = field(default_factory=dict)


def row(title: str) -> Panel:
    return Panel("row", title, width=24, height=1)


def timeseries(title: str, description: str, *targets: Target, unit: str = "short", width: int = 8,
               links: Sequence[TraceFilter] = (), threshold: float | None = None) -> Panel:
    return Panel("timeseries", title, description, list(targets), unit, width, 8, list(links), threshold)


def stat(title: str, description: str, *targets: Target, unit: str = "short", width: int = 4,
         red_from: float | None = None, links: Sequence[TraceFilter] = (), **extra: Any) -> Panel:
    return Panel("stat", title, description, list(targets), unit, width, 4, list(links),
                 stat_color_from=red_from, extra=extra)


def _target_json(t: Target, ref: str) -> dict[str, Any]:
    out: dict[str, Any] = {"refId": ref, "datasource": PROM, "editorMode": "code", "expr": t.expr,
                           "legendFormat": t.legend or "__auto", "range": not t.instant, "instant": t.instant}
    if t.table:
        out["format"] = "table"
    return out


def _thresholds(red_from: float | None) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if red_from is not None:
        steps.append({"color": "red", "value": red_from})
    return {"mode": "absolute", "steps": steps}


def _panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": pid, "type": p.kind, "title": p.title,
                           "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y}}
    if p.kind == "row":
        out.update({"collapsed": False, "panels": []})
        return out
    defaults: dict[str, Any] = {"unit": p.unit, "links": trace_links(p.links), "mappings": []}
    out.update({"description": p.description, "datasource": PROM,
                "targets": [_target_json(t, chr(ord("A") + i)) for i, t in enumerate(p.targets)]})
    if p.kind == "timeseries":
        defaults.update({"min": 0, "thresholds": _thresholds(p.threshold),
                         "custom": {"drawStyle": "line", "lineInterpolation": "stepAfter", "lineWidth": 1,
                                    "fillOpacity": 10, "showPoints": "never", "spanNulls": False,
                                    "thresholdsStyle": {"mode": "line" if p.threshold is not None else "off"}}})
        out["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                          "tooltip": {"mode": "multi", "sort": "desc"}}
    elif p.kind == "stat":
        defaults["thresholds"] = _thresholds(p.stat_color_from)
        if p.unit == "short":
            defaults["decimals"] = 0  # counts: increase() extrapolates to the range's edges (2.03 for 2)
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                          "textMode": p.extra.pop("text_mode", "auto"), "colorMode": "value",
                          "graphMode": "none", "justifyMode": "auto"}
        if "mappings" in p.extra:
            defaults["mappings"] = p.extra.pop("mappings")
    elif p.kind == "table":
        defaults["thresholds"] = _thresholds(None)
        out["options"] = {"showHeader": True, "cellHeight": "sm"}
        out["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    out["fieldConfig"] = {"defaults": defaults, "overrides": []}
    return out


def _layout(panels: Sequence[Panel]) -> list[dict[str, Any]]:
    """Left to right, wrapping at 24 columns; a row starts a new line."""
    out, x, y, line_height = [], 0, 0, 0
    for pid, p in enumerate(panels, start=1):
        if p.kind == "row" or x + p.width > 24:
            y, x, line_height = y + line_height, 0, 0
        out.append(_panel_json(p, pid, x, y))
        if p.kind == "row":
            y += 1
        else:
            x += p.width
            line_height = max(line_height, p.height)
    return out


# ---- dashboard frame -----------------------------------------------------------------------------


def _datasource_var(name: str, label: str, plugin: str, description: str) -> dict[str, Any]:
    return {"name": name, "label": label, "description": description, "type": "datasource", "query": plugin,
            "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
            "regex": ""}


def templating() -> dict[str, Any]:
    return {"list": [
        _datasource_var("datasource", "Prometheus", "prometheus", "The Prometheus that scrapes ccotel."),
        _datasource_var("tempo", "Tempo", "tempo", "Tempo data source for the trace links (optional)."),
        _datasource_var("jaeger", "Jaeger", "jaeger", "Jaeger data source for the trace links (optional)."),
        {"name": "service", "label": "Trace service.name", "type": "textbox", "query": "ccotel", "hide": 0,
         "description": "service.name of ccotel's spans (OTEL_SERVICE_NAME; ccotel by default).",
         "current": {"text": "ccotel", "value": "ccotel"},
         "options": [{"selected": True, "text": "ccotel", "value": "ccotel"}]},
        {"name": "instance", "label": "Instance", "type": "query", "datasource": PROM,
         "definition": "label_values(ccotel_build_info, instance)",
         "query": {"query": "label_values(ccotel_build_info, instance)", "qryType": 1,
                   "refId": "PrometheusVariableQueryEditor-VariableQuery"},
         "current": {}, "hide": 0, "includeAll": True, "allValue": ".*", "multi": True, "options": [],
         "refresh": 2, "regex": "", "sort": 1},
    ]}


def dashboard_links() -> list[dict[str, Any]]:
    return [
        {"title": "ccotel", "type": "dashboards", "tags": ["ccotel"], "asDropdown": True, "includeVars": True,
         "keepTime": True, "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""},
        {"title": "Traces in Tempo", "type": "link", "url": explore_url(tempo_pane(ALL_TRACES)),
         "tooltip": 'TraceQL { resource.service.name = "$service" } over this time range',
         "targetBlank": True, "icon": "external link", "asDropdown": False, "includeVars": False,
         "keepTime": False, "tags": []},
        {"title": "Traces in Jaeger", "type": "link", "url": explore_url(jaeger_pane(ALL_TRACES)),
         "tooltip": "Jaeger search for service $service over this time range", "targetBlank": True,
         "icon": "external link", "asDropdown": False, "includeVars": False, "keepTime": False, "tags": []},
    ]


def frame(uid: str, title: str, description: str, panels: Sequence[Panel]) -> dict[str, Any]:
    return {
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
            {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
            {"type": "panel", "id": "table", "name": "Table", "version": ""},
        ],
        "title": title, "uid": uid, "description": description, "tags": ["ccotel", "claude-code"],
        "editable": True, "fiscalYearStartMonth": 0, "graphTooltip": 1, "schemaVersion": SCHEMA_VERSION,
        "version": 1, "refresh": "1m", "time": {"from": "now-24h", "to": "now"}, "timepicker": {},
        "timezone": "browser", "weekStart": "", "liveNow": False,
        "links": dashboard_links(),
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": templating(),
        "panels": _layout(panels),
    }


# ---- the three dashboards -----------------------------------------------------------------------

MISSING = 'reason=~"missing[_-]transcript"'
NO_RESPONSE = TraceFilter("turns that got no API response (ghost sessions among them)",
                          (TURN, ("claude_code.turn.api_calls", 0)))


def operations(threshold: float) -> dict[str, Any]:
    range_ = "$__range"
    panels = [
        row("In the selected time range"),
        stat("Missing-transcript resets", "Sessions that restarted without their transcript, from transcripts "
             "(ghost sessions) and orchestrator logs.", Target(events("ccotel_session_resets_total", [], range_,
                                                                       MISSING)), red_from=1, links=[NO_RESPONSE]),
        stat("Orphaned tool calls", "Tool calls that never got a real result.",
             Target(events("ccotel_orphaned_tool_uses_total", [], range_)), red_from=1),
        stat("Watchdog kills", "Runs an orchestrator's no-output watchdog terminated (orchestrator logs).",
             Target(events("ccotel_watchdog_kills_total", [], range_)), red_from=1),
        stat("Aborts", "Sessions an orchestrator closed with an abort (orchestrator logs).",
             Target(events("ccotel_aborts_total", [], range_)), red_from=1),
        stat("Killed turns", "Turns whose Claude Code process died while they were open.",
             Target(events("ccotel_killed_turns_total", [], range_)), red_from=1,
             links=[TraceFilter("killed turns", (TURN, ("claude_code.turn.outcome", "killed")))]),
        stat("Stalled now", "Turns silent past --stall-timeout right now while the model or a tool owes a reply.",
             Target(f"sum({sel('ccotel_stalled_turns_open')})"), red_from=1),
        row("Resets"),
        timeseries(f"Missing-transcript resets per hour (alert above {threshold:g}/h)",
                   "What the alert CcotelMissingTranscriptResets watches: session resets for a missing transcript, "
                   "per hour over 15 minutes, by instance and source (transcript = a ghost session ccotel saw; "
                   "otherwise the orchestrator log's source). The red line is the alert's threshold; it fires "
                   "after 5 minutes above it. Trace link: turns that got no API response (orchestrator-reported "
                   "resets have no trace).",
                   Target(f"sum by (instance, source) (rate({sel('ccotel_session_resets_total', MISSING)}[15m]))"
                          " * 3600", "{{source}} on {{instance}}"),
                   unit="short", width=12, threshold=threshold, links=[NO_RESPONSE]),
        timeseries("Session resets by reason and source (last hour)",
                   "Resets in the hour before each point, by reason (missing_transcript, orphaned_tool_use, or "
                   "an orchestrator's) and source. Trace link: turns that got no API response (the ghost "
                   "sessions behind missing_transcript from transcripts; orphaned tool calls are on the Orphaned "
                   "tool calls panel).",
                   Target(events("ccotel_session_resets_total", ["reason", "source"], "1h"),
                          "{{reason}} ({{source}})"),
                   width=12, links=[NO_RESPONSE]),
        row("Failures"),
        timeseries("Aborts by reason and source (last hour)",
                   "Orchestrator log lines 'live session close ... reason=abort'. No trace link: the orchestrator "
                   "names no session ccotel can look up.",
                   Target(events("ccotel_aborts_total", ["reason", "source"], "1h"), "{{reason}} ({{source}})")),
        timeseries("Watchdog kills by source (last hour)",
                   "Orchestrator log lines 'CLI produced no output for Ns and was terminated' (alert "
                   "CcotelWatchdogKill). No trace link: the log names no session.",
                   Target(events("ccotel_watchdog_kills_total", ["source"], "1h"), "{{source}}")),
        timeseries("Orphaned tool calls by tool (last hour)",
                   "Tool calls that never got a real result: superseded by a new branch, process dead, idle past "
                   "the stall timeout with no live process, or repaired by a 2.1.3xx resume (alert "
                   "CcotelOrphanedToolUses). Trace links: that tool's calls left orphaned, or repaired on resume.",
                   Target(events("ccotel_orphaned_tool_uses_total", ["tool"], "1h"), "{{tool}}"),
                   links=[TraceFilter("this tool's orphaned calls",
                                      (("gen_ai.tool.name", LABEL % "tool"), ("error.type", "orphaned")), True),
                          TraceFilter("this tool's calls repaired on resume",
                                      (("gen_ai.tool.name", LABEL % "tool"), ("claude_code.tool.repaired", True)),
                                      True)]),
        timeseries("Stalled turns by outcome (last hour), open now",
                   "Turns that went silent past --stall-timeout while the model or a tool owed a reply, counted "
                   "once by what they turned out to be (recovered, killed, orphaned, incomplete); and the turns "
                   "stalled right now. Trace link: stalled turns.",
                   Target(events("ccotel_stalled_turns_total", ["outcome"], "1h"), "{{outcome}}"),
                   Target(f"sum({sel('ccotel_stalled_turns_open')})", "open now"),
                   links=[TraceFilter("stalled turns", (TURN, ("claude_code.turn.stalled", True)))]),
        timeseries("Killed turns (last hour)",
                   "Turns whose Claude Code process died (its sessions/<pid>.json names a dead or reused pid). "
                   "Trace link: killed turns.",
                   Target(events("ccotel_killed_turns_total", [], "1h"), "killed turns"),
                   links=[TraceFilter("killed turns", (TURN, ("claude_code.turn.outcome", "killed")))]),
        timeseries("Missing transcripts by kind (last hour)",
                   "Transcripts that should exist and never appeared: ghost sessions (a prompt, no assistant "
                   "record of any kind) and subagents named by a result or meta.json.",
                   Target(events("ccotel_missing_transcripts_total", ["kind"], "1h"), "{{kind}}"),
                   links=[NO_RESPONSE]),
        row("Orchestrator agents (--registry)"),
        timeseries("Registry agents by outcome (last hour), at work now",
                   "Agents of an orchestrator's registry (ccotel run --registry DIR) that ended: done, failed, or "
                   "killed (their process gone, or its pid taken by another, while the Status said in-progress); "
                   "and the agents whose Status says in-progress now. Trace link: the agents of that outcome.",
                   Target(events("ccotel_registry_agents_total", ["status"], "1h"), "{{status}}"),
                   Target(f"sum({sel('ccotel_registry_agents_in_progress')})", "at work now"),
                   links=[TraceFilter("registry agents of this outcome",
                                      (("claude_code.registry.outcome", LABEL % "status"),))]),
        timeseries("Killed registry agents (last hour)",
                   "Registry agents whose process died while their Status still said in-progress, counted once "
                   "(also across ccotel restarts). Trace link: the killed agents, each with the Claude Code session "
                   "it ran when that was found.",
                   Target(events("ccotel_registry_killed_agents_total", [], "1h"), "killed agents"),
                   links=[TraceFilter("killed registry agents", (("claude_code.registry.outcome", "killed"),))]),
        timeseries("Registry agent run time by type (mean over the last hour)",
                   "Started to Ended of the agents that ended in the hour before each point (a killed one: to its "
                   "output's last change), by agent type.",
                   Target(f"sum by (type) (increase({sel('ccotel_registry_agent_seconds_total')}[1h])) / "
                          f"sum by (type) (increase({sel('ccotel_registry_agents_total')}[1h]))", "{{type}}"),
                   unit="s"),
        row("Turns"),
        timeseries("Turns by outcome (per minute)",
                   "Turns finished: completed, interrupted, orphaned, killed, incomplete. Trace link: the turns "
                   "of that outcome.",
                   Target(per_minute("ccotel_turns_total", ["outcome"]), "{{outcome}}"), width=12,
                   links=[TraceFilter("turns of this outcome", (TURN, ("claude_code.turn.outcome",
                                                                       LABEL % "outcome")))]),
        timeseries("User interrupts (per minute)", "Turns the user interrupted (Esc).",
                   Target(per_minute("ccotel_user_interrupts_total", []), "interrupts"), width=12,
                   links=[TraceFilter("interrupted turns", (TURN, ("claude_code.turn.outcome", "interrupted")))]),
    ]
    return frame("ccotel-operations", "ccotel: operations",
                 "Claude Code session failures from ccotel: resets, aborts, watchdog kills, stalls, killed turns, "
                 "orphaned tool calls.", panels)


def usage() -> dict[str, Any]:
    range_ = "$__range"
    by_model = TraceFilter("API calls of this model", (("gen_ai.operation.name", "chat"),
                                                       ("gen_ai.response.model", LABEL % "model")))
    by_tool = TraceFilter("calls of this tool", (("gen_ai.tool.name", LABEL % "tool"),))
    cost = sel("ccotel_cost_usd_total")
    panels = [
        row("In the selected time range"),
        stat("Estimated cost", "Cost at list prices (genai-prices, or --prices), of the calls that have a price.",
             Target(events("ccotel_cost_usd_total", [], range_)), unit="currencyUSD"),
        stat("Claude Code's cost", "Claude Code's own figure (2.1.3xx cost-state lines); includes calls no "
             "transcript line records (compaction).", Target(events("ccotel_reported_cost_usd_total", [], range_)),
             unit="currencyUSD"),
        stat("Unpriced calls", "API calls of models without a price: not in the estimate (give them one with "
             "--prices).", Target(events("ccotel_unpriced_calls_total", [], range_)), red_from=1),
        stat("API calls", "API responses, one per message.id + requestId.",
             Target(events("ccotel_api_calls_total", [], range_))),
        stat("API errors", "Failed API calls written to the transcripts.",
             Target(events("ccotel_api_errors_total", [], range_)), red_from=1),
        stat("Tokens", "Input (fresh), output, cache read and cache creation tokens.",
             Target(events("ccotel_tokens_total", [], range_))),
        row("Tokens and cost"),
        timeseries("Tokens by model and type (per minute)",
                   "Exact token counts, once per API call (final snapshot). Trace link: that model's API calls.",
                   Target(per_minute("ccotel_tokens_total", ["model", "type"]), "{{model}} {{type}}"),
                   width=12, links=[by_model]),
        timeseries("Estimated cost by model (USD per hour)",
                   "Cost at list prices, as a rate over the panel interval. Trace link: that model's API calls.",
                   Target(f"sum by (model) (rate({cost}[$__rate_interval])) * 3600", "{{model}}"),
                   unit="currencyUSD", width=12, links=[by_model]),
        timeseries("Estimate vs Claude Code's cost (last hour)",
                   "ccotel's estimate, Claude Code's own figure, and the drift (estimate minus reported) for the "
                   "models both report. A drift that grows means a price table that is off, or calls the "
                   "transcripts do not show (compaction).",
                   Target(events("ccotel_cost_usd_total", ["model"], "1h"), "estimate {{model}}"),
                   Target(events("ccotel_reported_cost_usd_total", ["model"], "1h"), "reported {{model}}"),
                   Target(f'{events("ccotel_cost_usd_total", ["model"], "1h")} - '
                          f'{events("ccotel_reported_cost_usd_total", ["model"], "1h")}', "drift {{model}}"),
                   unit="currencyUSD", width=12),
        timeseries("Unpriced calls by model (last hour)",
                   "API calls of a model with no price: their cost is missing from the estimate, never counted "
                   "as $0. Trace link: that model's unpriced calls.",
                   Target(events("ccotel_unpriced_calls_total", ["model"], "1h"), "{{model}}"), width=12,
                   links=[TraceFilter("unpriced calls of this model",
                                      (("gen_ai.response.model", LABEL % "model"),
                                       ("claude_code.cost.unpriced", True)))]),
        row("API calls and tools"),
        timeseries("API calls by model (per minute)", "API responses. Trace link: that model's API calls.",
                   Target(per_minute("ccotel_api_calls_total", ["model"]), "{{model}}"), links=[by_model]),
        timeseries("API errors by type (last hour)",
                   "Failed API calls written to the transcripts, by HTTP status or type (retried calls that "
                   "succeeded leave no line). Trace link: the failed calls of that type.",
                   Target(events("ccotel_api_errors_total", ["type"], "1h"), "{{type}}"),
                   links=[TraceFilter("failed API calls of this type", (("gen_ai.operation.name", "chat"),
                                                                        ("error.type", LABEL % "type")), True)]),
        timeseries("Tool calls by tool and outcome (per minute)",
                   "ok, tool_error, rejected, interrupted, orphaned. Trace link: that tool's calls.",
                   Target(per_minute("ccotel_tool_calls_total", ["tool", "outcome"]), "{{tool}} {{outcome}}"),
                   links=[by_tool]),
        timeseries("Tool latency percentiles", "p50, p95 and p99 of tool_use to tool_result, by tool, over the "
                   "panel interval (buckets from 0.1 s to 30 min). Trace link: that tool's calls.",
                   *(Target(f"histogram_quantile({q}, sum by (le, tool) (rate("
                            f"{sel('ccotel_tool_duration_seconds_bucket')}[$__rate_interval])))", f"p{p} {{{{tool}}}}")
                     for q, p in ((0.5, 50), (0.95, 95), (0.99, 99))),
                   unit="s", width=12, links=[by_tool]),
        timeseries("Subagents by type (last hour)", "Subagents run (Task/Agent tool). Trace link: those subagents.",
                   Target(events("ccotel_subagents_total", ["type"], "1h"), "{{type}}"), width=6,
                   links=[TraceFilter("subagents of this type", (("gen_ai.operation.name", "invoke_agent"),
                                                                 ("gen_ai.agent.name", LABEL % "type")))]),
        timeseries("Compactions by trigger (last hour)", "Context compactions: auto or manual.",
                   Target(events("ccotel_compactions_total", ["trigger"], "1h"), "{{trigger}}"), width=6),
        row("Exactness"),
        timeseries("Tokens corrected by a later snapshot (last hour)",
                   "Tokens a call's final usage added after its span went out (a later, larger copy of the call, "
                   "e.g. in a compaction agent's file): in the counters and the ledger; the span sent keeps "
                   "what was known then.",
                   Target(events("ccotel_corrected_tokens_total", ["model", "type"], "1h"), "{{model}} {{type}}"),
                   width=12),
        timeseries("Calls without their envelope (last hour)",
                   "Assistant lines with a message id and usage but no type, uuid or sessionId (written by "
                   "other tools): counted as API calls all the same, by the field they lack.",
                   Target(events("ccotel_calls_without_envelope_total", ["missing"], "1h"), "{{missing}}"),
                   width=12),
        row("From Claude Code's hooks (ccotel hook)"),
        timeseries("Sessions ended by reason (last hour)", "SessionEnd hook events, by reason.",
                   Target(events("ccotel_sessions_ended_total", ["reason"], "1h"), "{{reason}}")),
        timeseries("Permission wait percentiles", "p50 and p95 of the time tool calls waited on the user's "
                   "permission, by tool, over the panel interval.",
                   *(Target(f"histogram_quantile({q}, sum by (le, tool) (rate("
                            f"{sel('ccotel_permission_wait_seconds_bucket')}[$__rate_interval])))",
                            f"p{p} {{{{tool}}}}") for q, p in ((0.5, 50), (0.95, 95))), unit="s"),
        timeseries("Hook events by event and kind (last hour)", "Hook events read from the spool.",
                   Target(events("ccotel_hook_events_total", ["event", "kind"], "1h"), "{{event}} {{kind}}")),
    ]
    return frame("ccotel-usage", "ccotel: usage",
                 "Claude Code usage from ccotel: tokens, cost, API calls and errors, tools, subagents.", panels)


def health() -> dict[str, Any]:
    range_ = "$__range"
    up = f"up{{{JOB}, {INSTANCE}}}"
    panels = [
        row("ccotel now"),
        stat("Up", "Prometheus scrapes ccotel (job=\"ccotel\"); alerts CcotelDown and CcotelAbsent.",
             Target(up, "{{instance}}"),
             mappings=[{"type": "value", "options": {"0": {"text": "DOWN", "color": "red"},
                                                     "1": {"text": "UP", "color": "green"}}}]),
        stat("Version", "ccotel_build_info.", Target(sel("ccotel_build_info"), "{{version}}"), text_mode="name"),
        stat("Uptime", "Since this ccotel process started.",
             Target(f"time() - {sel('ccotel_start_time_seconds')}", "{{instance}}"), unit="s"),
        stat("Files watched", "Transcript files followed.", Target(f"sum({sel('ccotel_files_watched')})")),
        stat("Ingest lag", "Age of the oldest unread transcript bytes (alert CcotelIngestLagging above 60 s).",
             Target(f"max({sel('ccotel_ingest_lag_seconds')})"), unit="s", red_from=60),
        stat("Export queue", "Spans waiting for the trace backend.",
             Target(f"sum({sel('ccotel_export_queue_spans')})")),
        row("Ingest"),
        timeseries("Ingest lag", "How long the newest unread transcript bytes have waited; the alert "
                   "CcotelIngestLagging fires after 5 minutes above the line.",
                   Target(sel("ccotel_ingest_lag_seconds"), "{{instance}}"), unit="s", threshold=60),
        timeseries("Transcript lines read (per second)", "Each line once, across restarts.",
                   Target(f"sum by (instance) (rate({sel('ccotel_lines_read_total')}[$__rate_interval]))",
                          "{{instance}}"), unit="short"),
        timeseries("Transcript bytes read (per second)", "Each byte once, across restarts.",
                   Target(f"sum by (instance) (rate({sel('ccotel_bytes_read_total')}[$__rate_interval]))",
                          "{{instance}}"), unit="Bps"),
        timeseries("Parse errors by reason (last hour)",
                   "Bad input skipped: malformed_json, invalid_utf8, nul_bytes, line_too_long, bad_field, "
                   "bad_timestamp, not_an_object, unreadable, path_outside_root, bad_meta_json.",
                   Target(events("ccotel_parse_errors_total", ["reason"], "1h"), "{{reason}}")),
        timeseries("Registry input not understood (last hour)",
                   "Orchestrator registry files read mid-write or not understood, by reason (malformed_json, "
                   "partial_front_matter, no_front_matter, bad_entry, bad_pid, unknown_status, ...): each read "
                   "again at its next change.",
                   Target(events("ccotel_registry_bad_input_total", ["reason"], "1h"), "{{reason}}")),
        timeseries("Format drift (last hour)",
                   "Lines of unknown types and unknown top-level fields (first sighting per process), by Claude "
                   "Code version: a new release changed the format. Trace link: spans of that version.",
                   Target(events("ccotel_format_unknown_total", ["version", "kind"], "1h"), "{{version}} {{kind}}"),
                   links=[TraceFilter("spans of this Claude Code version",
                                      (("claude_code.version", LABEL % "version"),))]),
        Panel("table", "Format drift: what ccotel did not know", "Every unknown line type and field ccotel "
              "counted, by Claude Code version (totals, kept across restarts).",
              [Target(f"sum by (version, kind, name) ({sel('ccotel_format_unknown_total')})", instant=True,
                      table=True)], width=8),
        timeseries("Files watched", "Transcript files followed.",
                   Target(sel("ccotel_files_watched"), "{{instance}}")),
        timeseries("Label values folded into other (last hour)",
                   "Increments whose label value (a tool, model or agent type from the transcripts) came after the "
                   "--max-label-values distinct values a label keeps: they count under `other`. A real value "
                   "that keeps folding means the cap is too low.",
                   Target(events("ccotel_label_values_folded_total", ["metric", "label"], "1h"),
                          "{{metric}} {{label}}")),
        timeseries("Connections to /metrics closed to let a new one in (last hour)",
                   "More connections to /metrics were open at once than ccotel holds (docs/metrics.md): the "
                   "oldest were closed so a scrape never waits behind idle ones. A steady count means something "
                   "holds connections open (a scanner, a client that never sends its request).",
                   Target(events("ccotel_metrics_connections_evicted_total", ["instance"], "1h"), "{{instance}}")),
        row("Export"),
        timeseries("Export queue", "Spans waiting for the trace backend (at most 20,000; then ccotel lets "
                   "spans go and reads them again later).",
                   Target(sel("ccotel_export_queue_spans"), "{{instance}}")),
        timeseries("Spans exported (per second)", "Spans the trace backend acknowledged.",
                   Target(f"sum by (instance) (rate({sel('ccotel_spans_exported_total')}[$__rate_interval]))",
                          "{{instance}}")),
        timeseries("Spans dropped by reason (last hour)",
                   "Spans that will never reach the backend: rejected (bad_request, http_<code>, grpc_<code>, "
                   "partial_success), too_large, unencodable. No trace link: they are not in the backend.",
                   Target(events("ccotel_spans_dropped_total", ["reason"], "1h"), "{{reason}}")),
        timeseries("Export failures (last hour)", "Export attempts the backend refused or missed (retried); "
                   "the alert CcotelExportFailing fires when nothing is exported for 10 minutes while they "
                   "continue.", Target(events("ccotel_export_failures_total", [], "1h"), "{{instance}}")),
        timeseries("Time since the last export", "Seconds since the backend last acknowledged spans (idle is "
                   "fine: nothing to send).",
                   Target(f"time() - {sel('ccotel_last_export_success_timestamp_seconds')}", "{{instance}}"),
                   unit="s"),
        row("State"),
        timeseries("Checkpoint errors by reason (last hour)",
                   "Checkpoint commits that failed (disk_full, read_only, io_error, locked, corrupt, other); "
                   "held in memory and retried, nothing lost while ccotel runs.",
                   Target(events("ccotel_checkpoint_errors_total", ["reason"], "1h"), "{{reason}}"), width=12),
        timeseries("Checkpoint writes pending", "Checkpoint writes held for retry; back to 0 once a write "
                   "succeeds.", Target(sel("ccotel_checkpoint_pending"), "{{instance}}"), width=12),
        stat("Parse errors", "Bad input lines skipped in the selected time range.",
             Target(events("ccotel_parse_errors_total", [], range_)), red_from=1, width=6),
        stat("Spans dropped", "Spans the backend will never get, in the selected time range.",
             Target(events("ccotel_spans_dropped_total", [], range_)), red_from=1, width=6),
        stat("Checkpoint errors", "Failed checkpoint commits in the selected time range.",
             Target(events("ccotel_checkpoint_errors_total", [], range_)), red_from=1, width=6),
        stat("Format drift", "Unknown line types and fields counted in the selected time range.",
             Target(events("ccotel_format_unknown_total", [], range_)), red_from=1, width=6),
    ]
    return frame("ccotel-health", "ccotel: health",
                 "ccotel itself: up, version, ingest lag, export, checkpoints, parse errors, format drift.", panels)


def build() -> dict[str, dict[str, Any]]:
    """File name -> dashboard."""
    return {FILES["operations"]: operations(alert_threshold()), FILES["usage"]: usage(),
            FILES["health"]: health()}


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    stale = []
    for name, board in build().items():
        path = HERE / name
        text = render(board)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
