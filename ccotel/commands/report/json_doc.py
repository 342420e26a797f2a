"""A report as JSON shaped like ``ccusage <view> --json``, with ccotel's own figures beside
ccusage's; and ``dumps``, that JSON's text."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from json.encoder import encode_basestring
from typing import Any

from ccotel.commands.report.rows import Report, Row, report_models

__all__ = ["as_json", "dumps"]

_VIEW_KEYS = {"daily": ("daily", "date"), "weekly": ("weekly", "week"), "monthly": ("monthly", "month"),
              "session": ("sessions", "sessionId"), "project": ("projects", "project")}


def _iso(ns: int) -> str | None:
    if not ns:
        return None
    # isoformat, not strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]: the same text (milliseconds truncated), faster
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


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



def dumps(doc: Any) -> str:
    """``orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()``, byte for byte, for a document of
    dicts, lists, strings, ints, floats, bools and None: written here because importing orjson
    (it imports dataclasses, uuid and more) is a noticeable part of a report's start from the
    ledger, and the stdlib's json writes floats and empty containers differently."""
    return _value(doc, "\n")


def _value(v: Any, nl: str) -> str:
    """``v`` as orjson writes it indented; ``nl``: a newline and the current indent. (A scalar
    item is written without a call of its own: the report's JSON is mostly scalars.)"""
    scalar = _SCALARS.get(type(v))
    if scalar is not None:
        return scalar(v)
    inner = nl + "  "
    get = _SCALARS.get
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{" + ",".join([inner + encode_basestring(k) + ": " + (f(item) if (f := get(type(item))) else
                                                                      _value(item, inner))
                               for k, item in v.items()]) + nl + "}"
    if isinstance(v, (list, tuple)):
        if not v:
            return "[]"
        return "[" + ",".join([inner + (f(item) if (f := get(type(item))) else _value(item, inner))
                               for item in v]) + nl + "]"
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def _float(v: float) -> str:
    """A float as orjson writes it: Python's shortest repr, but 0.0000dd rather than d.de-05 and
    1e-6 rather than 1e-06; not finite: null."""
    if v != v or v in (float("inf"), float("-inf")):
        return "null"
    text = repr(v)
    mantissa, e, exp = text.partition("e")
    if not e or exp[0] == "+":
        return text
    power = int(exp)
    if power == -5:  # repr's exponent starts below 1e-4, orjson's below 1e-5
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return sign + "0.0000" + digits.replace(".", "")
    return f"{mantissa}e{power}"


_SCALARS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring,  # escapes as orjson: ", \\ and control characters only
    int: int.__repr__, float: _float, bool: lambda b: "true" if b else "false", type(None): lambda _: "null",
}
