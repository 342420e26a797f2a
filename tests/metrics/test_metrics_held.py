"""The counts a span feeds, and where they wait until the span is final: held per span (exposed,
never checkpointed), moved to the checkpointed channel by ``settle``, kept by ``let_go``, forgotten
by ``drop_pending``. Each increment is applied exactly once, in span order."""

from __future__ import annotations

import pytest

from ccotel.metrics.counters import DURATION_BUCKETS, Metrics, _span_increments
from ccotel.records import SpanKind, SpanRecord


def tool_span(span_id: int, seconds_ns: int, tool: str = "Bash") -> SpanRecord:
    return SpanRecord(trace_id=1, span_id=span_id, parent_span_id=9, name=f"execute_tool {tool}",
                      kind=SpanKind.INTERNAL, start_ns=10**12, end_ns=10**12 + seconds_ns,
                      attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})


def chat_span(span_id: int, cost: float) -> SpanRecord:
    return SpanRecord(trace_id=1, span_id=span_id, parent_span_id=9, name="chat m", kind=SpanKind.CLIENT,
                      start_ns=0, end_ns=1, attributes={"gen_ai.operation.name": "chat", "gen_ai.response.model": "m",
                                                        "gen_ai.usage.output_tokens": 7, "claude_code.cost.usd": cost})


# Every bucket's bound itself, a nanosecond either side, nothing, a negative duration (clock
# skew: counted as 0) and past the last bound.
_EDGES = sorted({0, -5, 10**9 * 3600} | {int(le * 1e9) + d for le in DURATION_BUCKETS for d in (-1, 0, 1)})


@pytest.mark.parametrize("duration_ns", _EDGES)
def test_a_tool_duration_falls_in_the_buckets_at_or_above_it(duration_ns: int) -> None:
    seconds = max(duration_ns, 0) / 1e9
    got = [k[2] for k, v in _span_increments(tool_span(1, duration_ns)) if k[0].endswith("_bucket")]
    assert got == [repr(le) for le in DURATION_BUCKETS if seconds <= le]
    sums = [v for k, v in _span_increments(tool_span(1, duration_ns)) if k[0].endswith("_sum")]
    assert sums == [seconds]


def test_held_counts_are_exposed_then_settled_once_and_only_settled_ones_are_saved() -> None:
    m = Metrics()
    costs = [0.1, 0.2, 0.3, 1e-7]
    for i, c in enumerate(costs):
        m.observe_span(chat_span(i, c), span_key=i)
    m.observe_span(tool_span(10, 2 * 10**9), span_key=10)
    assert m.value("ccotel_api_calls", "m") == 4.0 and m.value("ccotel_tool_calls", "Bash", "ok") == 1.0
    assert m.snapshot() == {}  # nothing final: nothing to checkpoint
    m.settle([0, 1, 99])  # 99: never observed
    saved = m.snapshot("delivered")
    assert saved["delivered:ccotel_api_calls\x1fm"] == 2.0 and saved["delivered:ccotel_cost_usd\x1fm"] == 0.1 + 0.2
    assert m.value("ccotel_api_calls", "m") == 4.0  # held or settled, exposed once
    m.settle([0, 1])  # settled twice: counted once
    assert m.snapshot("delivered")["delivered:ccotel_api_calls\x1fm"] == 2.0
    m.let_go([2, 10])  # built again later: counted (exposed), no longer held per span
    assert m.value("ccotel_api_calls", "m") == 4.0 and m.value("ccotel_tool_calls", "Bash", "ok") == 1.0
    m.settle([2, 10])
    assert m.snapshot("delivered")["delivered:ccotel_api_calls\x1fm"] == 2.0
    series = m.series()
    assert series[("ccotel_api_calls", "m")] == 4.0
    assert series[("ccotel_tool_duration_seconds_bucket", "Bash", "2.5")] == 1.0
    m.drop_pending()  # read again from the trace cursor: only what was settled stays
    assert m.value("ccotel_api_calls", "m") == 2.0 and m.value("ccotel_tool_calls", "Bash", "ok") == 0.0
    m.settle([3])  # forgotten by drop_pending: nothing to settle
    assert m.value("ccotel_api_calls", "m") == 2.0


def test_settled_sums_add_in_span_order() -> None:
    """The checkpointed cost is the same float sum, in the same order, as adding span by span."""
    costs = [0.1, 1e-17, 0.7, 3.3e-5, 1e16, -1e16, 0.05]
    m = Metrics()
    for i, c in enumerate(costs):
        m.observe_span(chat_span(i, c), span_key=i)
    m.settle(range(len(costs)))
    want = 0.0
    for c in costs:
        want += c
    assert m.snapshot("delivered")["delivered:ccotel_cost_usd\x1fm"] == want
