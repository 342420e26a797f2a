"""``ccotel report``: token usage and estimated cost per session, read from the same spans
ccotel exports (so the report and the traces can never disagree). Like ``ccusage session --json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .pipeline import Options, Pipeline
from .records import SpanRecord

__all__ = ["SessionUsage", "session_usage", "build_report"]


@dataclass
class SessionUsage:
    session_id: str
    input_tokens: int = 0  # fresh input only, as ccusage counts it
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    api_calls: int = 0
    cost_usd: float = 0.0
    models: set[str] = field(default_factory=set)
    first_ns: int = 0
    last_ns: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_tokens + self.cache_read_tokens

    def as_dict(self) -> dict[str, object]:
        return {
            "sessionId": self.session_id, "inputTokens": self.input_tokens, "outputTokens": self.output_tokens,
            "cacheCreationTokens": self.cache_creation_tokens, "cacheReadTokens": self.cache_read_tokens,
            "totalTokens": self.total_tokens, "apiCalls": self.api_calls, "totalCost": round(self.cost_usd, 6),
            "modelsUsed": sorted(self.models), "firstActivity": self.first_ns, "lastActivity": self.last_ns,
        }


def session_usage(spans: Iterable[SpanRecord], into: dict[str, SessionUsage] | None = None) -> dict[str, SessionUsage]:
    out = {} if into is None else into
    for s in spans:
        a = s.attributes
        if "gen_ai.usage.output_tokens" not in a:
            continue
        sid = str(a.get("gen_ai.conversation.id", ""))
        u = out.get(sid)
        if u is None:
            u = out[sid] = SessionUsage(sid, first_ns=s.start_ns)
        u.input_tokens += int(a.get("claude_code.usage.input_tokens", 0))
        u.output_tokens += int(a["gen_ai.usage.output_tokens"])
        u.cache_creation_tokens += int(a.get("gen_ai.usage.cache_creation.input_tokens", 0))
        u.cache_read_tokens += int(a.get("gen_ai.usage.cache_read.input_tokens", 0))
        u.cost_usd += float(a.get("claude_code.cost.usd", 0.0))
        u.api_calls += 1
        model = a.get("gen_ai.response.model")
        if isinstance(model, str):
            u.models.add(model)
        u.first_ns = min(u.first_ns, s.start_ns)
        u.last_ns = max(u.last_ns, s.end_ns)
    return out


def build_report(options: Options) -> dict[str, SessionUsage]:
    totals: dict[str, SessionUsage] = {}
    pipeline = Pipeline(options, emit=lambda spans: session_usage(spans, totals))
    pipeline.backfill(close_all=True)
    return totals
