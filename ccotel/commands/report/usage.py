"""Per-session usage summed from exported chat spans: the reference the report's transcript reader
is held equal to (tests), so the report and the traces cannot disagree; ``ccotel sessions`` sums
its figures with it too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ccotel.spans.attributes import (
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
)
from ccotel.store.ledger import nano_usd

if TYPE_CHECKING:
    from ccotel.records import SpanRecord

__all__ = ["UsageTuple", "SessionUsage", "session_usage"]

# A call's usage as a plain tuple, cheap to build, merge and send between processes:
# (input, output, cache read, cache creation, cache creation 5m, cache creation 1h, reasoning).
UsageTuple = tuple[int, int, int, int, int, int, int]


@dataclass
class SessionUsage:
    session_id: str
    input_tokens: int = 0  # fresh input only, as ccusage counts it
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    api_calls: int = 0
    cost_nano: int = 0  # nano-dollars (ledger.nano_usd), as the report sums them
    models: set[str] = field(default_factory=set)
    unpriced_models: set[str] = field(default_factory=set)  # calls of these models have no price: cost is low
    # model -> [input, output, cache creation, cache read, calls, cost]
    by_model: dict[str, list[float]] = field(default_factory=dict)
    first_ns: int = 0
    last_ns: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_tokens + self.cache_read_tokens

    @property
    def cost_usd(self) -> float:
        return self.cost_nano / 1e9

    def add(self, u: UsageTuple, cost: float | None, model: str | None, first_ns: int, last_ns: int) -> None:
        self.input_tokens += u[0]
        self.output_tokens += u[1]
        self.cache_read_tokens += u[2]
        self.cache_creation_tokens += u[3]
        self.cost_nano += 0 if cost is None else nano_usd(cost)
        self.api_calls += 1
        if model:
            self.models.add(model)
        if cost is None:
            self.unpriced_models.add(model or "unknown")  # a line that names no model: unpriced too
        per = self.by_model.setdefault(model or "unknown", [0, 0, 0, 0, 0, 0.0])
        for i, v in enumerate((u[0], u[1], u[3], u[2], 1, cost or 0.0)):
            per[i] += v
        if first_ns:
            self.first_ns = min(self.first_ns, first_ns) if self.first_ns else first_ns
        self.last_ns = max(self.last_ns, last_ns)

    def as_dict(self) -> dict[str, object]:
        return {
            "sessionId": self.session_id, "inputTokens": self.input_tokens, "outputTokens": self.output_tokens,
            "cacheCreationTokens": self.cache_creation_tokens, "cacheReadTokens": self.cache_read_tokens,
            "totalTokens": self.total_tokens, "apiCalls": self.api_calls, "totalCost": round(self.cost_usd, 6),
            "modelsUsed": sorted(self.models), "unpricedModels": sorted(self.unpriced_models),
            "firstActivity": self.first_ns, "lastActivity": self.last_ns,
        }


def session_usage(spans: Iterable[SpanRecord], into: dict[str, SessionUsage] | None = None) -> dict[str, SessionUsage]:
    """Per-session usage of exported chat spans (the reference the fast report is held to)."""
    out = {} if into is None else into
    for s in spans:
        a = s.attributes
        if GEN_AI_USAGE_OUTPUT_TOKENS not in a:
            continue
        sid = str(a.get(GEN_AI_CONVERSATION_ID, ""))
        u = out.get(sid)
        if u is None:
            u = out[sid] = SessionUsage(sid)
        usage = (int(a.get(CLAUDE_CODE_USAGE_INPUT_TOKENS, 0)), int(a[GEN_AI_USAGE_OUTPUT_TOKENS]),
                 int(a.get(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0)),
                 int(a.get(GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, 0)), 0, 0,
                 int(a.get(GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, 0)))
        model = a.get(GEN_AI_RESPONSE_MODEL)
        cost = a.get(CLAUDE_CODE_COST_USD)
        u.add(usage, float(cost) if cost is not None else None, model if isinstance(model, str) else None,
              s.start_ns, s.end_ns)
    return out
