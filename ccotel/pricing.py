"""Estimated cost of an API call from its usage, at list prices.

The prices come from ``genai-prices`` (MIT, by Pydantic): a maintained table that knows new
models as they ship, with historical prices and context tiers; a JSON file given with
``--prices`` overrides it per model. ``genai-prices`` decides *which* price applies (the model
matched by its id and the call's date); the arithmetic is done here on floats, because its
own Decimal-based calculation costs ~270 us a call and a report prices hundreds of thousands
(``tests/test_pricing.py`` holds the two equal). A model without a price is never $0: the cost
is None and the caller flags it (span attribute, report column, metric).

Claude Code's own ``costUSD`` figures exist only in 2.1.3xx ``cost-state`` lines and on the
stream-json stdout; they are shown beside this estimate, never instead of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from .records import Usage

__all__ = ["Price", "Pricing", "DEFAULT_PRICING", "load_overrides"]

_DAY_NS = 86_400 * 1_000_000_000


@dataclass(frozen=True)
class Rate:
    """USD per million tokens: ``base``, or from ``tiers`` [(threshold, rate)] when the call's
    whole input (fresh + cache read + cache write) exceeds the threshold (applies to all tokens)."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, total_input: int) -> float:
        rate = self.base
        for start, tier_rate in self.tiers:
            if total_input > start:
                rate = tier_rate
        return rate


@dataclass(frozen=True)
class Price:
    input: Rate
    output: Rate
    cache_write_5m: Rate
    cache_write_1h: Rate
    cache_read: Rate
    source: str = "genai-prices"

    def cost(self, u: Usage) -> float:
        total_input = u.total_input
        # Cache writes split by TTL when the transcript says so; otherwise all at the 5-minute rate.
        split = u.cache_creation_5m + u.cache_creation_1h
        w1 = u.cache_creation_1h if split else 0
        w5 = u.cache_creation_input_tokens - w1
        return (u.input_tokens * self.input.at(total_input) + u.output_tokens * self.output.at(total_input)
                + w5 * self.cache_write_5m.at(total_input) + w1 * self.cache_write_1h.at(total_input)
                + u.cache_read_input_tokens * self.cache_read.at(total_input)) / 1e6


def _rate(value: Any, fallback: Rate | None = None) -> Rate | None:
    """A genai-prices price field (Decimal, TieredPrices or None) as a Rate."""
    if value is None:
        return fallback
    if isinstance(value, (Decimal, int, float)):
        return Rate(float(value))
    base = getattr(value, "base", None)
    tiers = getattr(value, "tiers", None)
    if base is None:
        return fallback
    return Rate(float(base), tuple((int(t.start), float(t.price)) for t in tiers or ()))


def _from_genai_prices(model: str, at_ns: int | None) -> Price | None:
    try:
        from genai_prices import Usage as GUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    when = datetime.fromtimestamp(at_ns / 1e9, tz=timezone.utc) if at_ns else None
    try:
        mp = calc_price(GUsage(input_tokens=1), model, provider_id="anthropic",
                        genai_request_timestamp=when).model_price
    except (LookupError, ValueError):
        return None
    inp = _rate(mp.input_mtok)
    out = _rate(mp.output_mtok)
    if inp is None or out is None:
        return None
    w5 = _rate(mp.cache_write_mtok, inp)
    assert w5 is not None
    return Price(inp, out, w5, _rate(mp.cache_write_1h_mtok, w5) or w5, _rate(mp.cache_read_mtok, inp) or inp)


def load_overrides(path: str) -> dict[str, Price]:
    """``{"model-id-or-prefix": {"input": 5, "output": 25, "cache_read": 0.5, "cache_write_5m": 6.25,
    "cache_write_1h": 10}}`` in USD per million tokens; the longest matching prefix wins."""
    with open(path, "rb") as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected an object of model -> prices")
    out = {}
    for model, p in raw.items():
        if not isinstance(p, dict) or not all(isinstance(p.get(k), (int, float)) for k in ("input", "output")):
            raise ValueError(f"{path}: {model!r} needs numeric input and output prices")
        inp, outp = Rate(float(p["input"])), Rate(float(p["output"]))
        w5 = Rate(float(p.get("cache_write_5m", p["input"] * 1.25)))
        out[str(model)] = Price(inp, outp, w5, Rate(float(p.get("cache_write_1h", p["input"] * 2))),
                                Rate(float(p.get("cache_read", p["input"] * 0.1))), source=f"file:{path}")
    return out


@dataclass(eq=False)
class Pricing:
    """Prices per model and day: overrides first, then genai-prices. Lookups are cached per
    (model, UTC day): a handful of models, one lookup each per day of history."""

    overrides: dict[str, Price] = field(default_factory=dict)
    _cache: dict[tuple[str, int], Price | None] = field(default_factory=dict, repr=False)

    def price(self, model: str | None, at_ns: int | None = None) -> Price | None:
        if not model:
            return None
        day = (at_ns or 0) // _DAY_NS
        key = (model, day)
        if key in self._cache:
            return self._cache[key]
        found = self._override(model)
        if found is None:
            found = _from_genai_prices(model, at_ns)
        if len(self._cache) > 65_536:
            self._cache.clear()
        self._cache[key] = found
        return found

    def cost(self, model: str | None, u: Usage, at_ns: int | None = None) -> float | None:
        """USD, or None for a model without a known price."""
        p = self.price(model, at_ns)
        return None if p is None else p.cost(u)

    def _override(self, model: str) -> Price | None:
        best = max((m for m in self.overrides if model.startswith(m)), key=len, default=None)
        return self.overrides[best] if best is not None else None


# One shared table for callers that take no --prices file (its cache is its only state).
DEFAULT_PRICING = Pricing()
