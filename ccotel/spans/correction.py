"""A later, larger snapshot of a call whose span already went out (assemble's ``Correction``): what the
ledger and the counters take of it. The span sent keeps what was known then; no span is sent again.

- ``ledger_span``: the call as the chat span would now say it (its key, model, usage and cost), for
  the ledger alone: its upsert keeps the larger snapshot of a key (store/ledger.py).
- ``correction_span``: the difference, for the counters alone (metrics/counters.py counts it in
  ``ccotel_tokens_total``, ``ccotel_cost_usd_total`` and ``ccotel_corrected_tokens_total``). Its id is
  derived from the call and the snapshot it brings, so a restart that reads the line again finds it
  delivered (state.acked) and counts it once.
"""

from __future__ import annotations

from ccotel.assemble import ids
from ccotel.assemble.model import Correction
from ccotel.records import SpanKind, SpanRecord, Usage
from ccotel.rules import transcript as rules
from ccotel.spans.attributes import (
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_REQUEST_ID,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    CLAUDE_CODE_UUID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from ccotel.spans.build import DEFAULT_CONVENTIONS, Conventions, usage_attributes
from ccotel.spans.pricing import Pricing

__all__ = ["CORRECTION_OPERATION", "correction_span", "ledger_span"]

CORRECTION_OPERATION = "usage_correction"  # never exported: counted, then acknowledged at once


def ledger_span(c: Correction, pricing: Pricing, conventions: Conventions = DEFAULT_CONVENTIONS) -> SpanRecord:
    model = rules.reported_model(c.model)
    attrs: dict[str, object] = {GEN_AI_OPERATION_NAME: "chat", GEN_AI_CONVERSATION_ID: c.session_id}
    if model is not None:
        attrs[GEN_AI_RESPONSE_MODEL] = model
    if c.message_id:
        attrs[GEN_AI_RESPONSE_ID] = c.message_id
    elif c.key.startswith("line:"):
        attrs[CLAUDE_CODE_UUID] = c.key[len("line:"):]  # a call with no message id: named by its line
    if c.request_id:
        attrs[CLAUDE_CODE_REQUEST_ID] = c.request_id
    usage_attributes(attrs, model, c.usage, conventions, pricing.cost(model, c.usage, c.time_ns))
    return SpanRecord(0, ids.span_id("chat", c.key), None, f"chat {model or 'unknown'}", SpanKind.CLIENT,
                      c.time_ns, c.time_ns, attrs)


def correction_span(c: Correction, before: Usage, pricing: Pricing) -> SpanRecord:
    """The difference between the snapshot counted (``before``) and the later one ``c`` brings."""
    model = rules.reported_model(c.model)
    u = c.usage
    attrs: dict[str, object] = {
        GEN_AI_OPERATION_NAME: CORRECTION_OPERATION, GEN_AI_RESPONSE_MODEL: model or "unknown",
        CLAUDE_CODE_USAGE_INPUT_TOKENS: max(u.input_tokens - before.input_tokens, 0),
        GEN_AI_USAGE_OUTPUT_TOKENS: max(u.output_tokens - before.output_tokens, 0),
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: max(u.cache_read_input_tokens - before.cache_read_input_tokens, 0),
        GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: max(
            u.cache_creation_input_tokens - before.cache_creation_input_tokens, 0),
    }
    now, then = pricing.cost(model, u, c.time_ns), pricing.cost(model, before, c.time_ns)
    if now is not None and then is not None and now > then:
        attrs[CLAUDE_CODE_COST_USD] = round(now - then, 9)
    snapshot = f"{u.input_tokens}/{u.output_tokens}/{u.cache_read_input_tokens}/{u.cache_creation_input_tokens}"
    return SpanRecord(0, ids.span_id(CORRECTION_OPERATION, c.key, snapshot), None, CORRECTION_OPERATION,
                      SpanKind.INTERNAL, c.time_ns, c.time_ns, attrs)
