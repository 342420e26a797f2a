"""What only the stream has, as attributes: its ``result`` records (on the turn span) and its
``api_retry`` records (events of the turn span).

Apart from the span building because the transcript has no such records: the names are the
relay's own (``ccotel.result.*``, ``ccotel.api_retry.*``), written by no other source.
"""

from __future__ import annotations

from typing import Any

from ccotel.spans.attributes import (
    CCOTEL_API_RETRY_ERROR,
    CCOTEL_API_RETRY_PREFIX,
    CCOTEL_RESULT_MODEL_USAGE_COST_USD,
    CCOTEL_RESULT_MODEL_USAGE_MODELS,
    CCOTEL_RESULT_MODEL_USAGE_PREFIX,
    CCOTEL_RESULT_PERMISSION_DENIALS,
    CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS,
    CCOTEL_RESULT_PREFIX,
    CCOTEL_RESULT_USAGE_PREFIX,
)

__all__ = ["int_or_zero", "result_attributes", "retry_attributes"]


_RESULT_SCALARS = (("subtype", str), ("is_error", bool), ("num_turns", int), ("duration_ms", int),
                   ("duration_api_ms", int), ("total_cost_usd", float), ("terminal_reason", str),
                   ("stop_reason", str), ("api_error_status", int))


def result_attributes(r: dict[str, Any]) -> dict[str, Any]:
    """A ``result`` record as ``ccotel.result.*`` attributes (no GenAI convention covers them;
    usage goes under ccotel.result too: gen_ai.usage.* on the turn span would count the chat
    spans' tokens twice in backends that add them up)."""
    out: dict[str, Any] = {}
    for name, typ in _RESULT_SCALARS:
        v = r.get(name)
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, typ) and (typ is bool or not isinstance(v, bool)):
            out[f"{CCOTEL_RESULT_PREFIX}{name}"] = v
    usage = r.get("usage")
    if isinstance(usage, dict):
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            out[f"{CCOTEL_RESULT_USAGE_PREFIX}{key}"] = int_or_zero(usage.get(key))
    models = r.get("modelUsage")
    if isinstance(models, dict) and models:
        names = sorted(str(m) for m in models)
        out[CCOTEL_RESULT_MODEL_USAGE_MODELS] = tuple(names)
        for attr, key in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
                          ("cache_read_input_tokens", "cacheReadInputTokens"),
                          ("cache_creation_input_tokens", "cacheCreationInputTokens")):
            out[f"{CCOTEL_RESULT_MODEL_USAGE_PREFIX}{attr}"] = tuple(int_or_zero(_fig(models, m).get(key))
                                                                    for m in names)
        out[CCOTEL_RESULT_MODEL_USAGE_COST_USD] = tuple(float(_fig(models, m).get("costUSD") or 0.0)
                                                          for m in names)
    denials = r.get("permission_denials")
    if isinstance(denials, list):
        out[CCOTEL_RESULT_PERMISSION_DENIALS] = len(denials)
        tools = [str(d.get("tool_name")) for d in denials if isinstance(d, dict) and d.get("tool_name")]
        if tools:
            out[CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS] = tuple(tools)  # their inputs may hold secrets
    return out


def _fig(models: dict[str, Any], name: str) -> dict[str, Any]:
    v = models.get(name)
    return v if isinstance(v, dict) else {}


def retry_attributes(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("attempt", "max_retries", "retry_delay_ms", "error_status"):
        if isinstance(r.get(key), int) and not isinstance(r.get(key), bool):
            out[f"{CCOTEL_API_RETRY_PREFIX}{key}"] = r[key]
    if isinstance(r.get("error"), str):
        out[CCOTEL_API_RETRY_ERROR] = r["error"]
    return out


def int_or_zero(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0

