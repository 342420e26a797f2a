"""A report as JSON shaped like ``ccusage <view> --json``, with ccotel's own figures beside
ccusage's."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ccotel.commands.report.rows import Report, Row, report_models

__all__ = ["as_json"]

_VIEW_KEYS = {"daily": ("daily", "date"), "weekly": ("weekly", "week"), "monthly": ("monthly", "month"),
              "session": ("sessions", "sessionId"), "project": ("projects", "project")}


def _iso(ns: int) -> str | None:
    if not ns:
        return None
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _figures(r: Row, known: bool) -> dict[str, Any]:
    """ccusage's fields (20.x) and ccotel's own beside them; ``known``: Report.knows(r) (else the
    tool, subagent and health figures are null, never 0: the document's unknownReason says why)."""
    return {
        "inputTokens": r.input, "outputTokens": r.output, "cacheCreationTokens": r.cache_write,
        "cacheReadTokens": r.cache_read, "totalTokens": r.total_tokens, "totalCost": round(r.cost, 6),
        "cacheCreation5mTokens": r.cache_write_5m, "cacheCreation1hTokens": r.cache_write_1h,
        "reasoningTokens": r.reasoning, "apiCalls": r.api_calls, "apiErrors": r.api_errors,
        "toolCalls": r.tool_calls if known else None, "toolErrors": r.tool_errors if known else None,
        "subagents": r.subagents if known else None, "health": r.health() if known else None,
    }


def as_json(report: Report) -> dict[str, Any]:
    """The report shaped like ``ccusage <view> --json`` (where ccusage has the view)."""
    name, key_field = _VIEW_KEYS[report.view]
    rows = []
    for r in report.rows:
        doc: dict[str, Any] = {key_field: r.key}
        if report.view == "session":
            doc.update({"projectPath": r.project, "cwd": r.cwd, "firstActivity": _iso(r.first_ns),
                        "lastActivity": _iso(r.last_ns)})
        elif report.view == "project":
            doc.update({"projectPath": r.project, "cwd": r.cwd, "firstActivity": _iso(r.first_ns),
                        "lastActivity": _iso(r.last_ns)})
        doc.update(_figures(r, report.knows(r)))
        doc["modelsUsed"] = sorted(r.models)
        doc["unpricedModels"] = sorted(r.unpriced)
        doc["modelBreakdowns"] = [
            {"modelName": m, "inputTokens": t.input, "outputTokens": t.output, "cacheCreationTokens": t.cache_write,
             "cacheReadTokens": t.cache_read, "cost": round(t.cost, 6), "apiCalls": t.calls}
            for m, t in sorted(report_models(r))]
        rows.append(doc)
    totals = _figures(report.totals, report.knows(report.totals))
    totals["unpricedModels"] = sorted(report.totals.unpriced)
    return {name: rows, "totals": totals, "source": report.source, "unknownReason": report.why_unknown()}

