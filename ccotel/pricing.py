"""Estimated cost of an API call from its usage (USD per million tokens, Anthropic list prices).

An estimate: Claude Code's own `total_cost_usd` exists only on the stream-json stdout, never
in the transcript. Unknown models cost 0 and are reported as unpriced.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .records import Usage

__all__ = ["Price", "price_for", "cost_usd"]


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float


# Longest matching prefix wins; model ids carry dates (claude-sonnet-4-5-20250929).
_PRICES: tuple[tuple[str, Price], ...] = (
    *((f"claude-opus-4-{minor}", Price(5, 25, 6.25, 10, 0.50)) for minor in range(5, 10)),
    ("claude-opus-4-1", Price(15, 75, 18.75, 30, 1.50)),
    ("claude-opus-4", Price(15, 75, 18.75, 30, 1.50)),
    ("claude-3-opus", Price(15, 75, 18.75, 30, 1.50)),
    ("claude-sonnet-4", Price(3, 15, 3.75, 6, 0.30)),
    ("claude-3-7-sonnet", Price(3, 15, 3.75, 6, 0.30)),
    ("claude-3-5-sonnet", Price(3, 15, 3.75, 6, 0.30)),
    ("claude-haiku-4-5", Price(1, 5, 1.25, 2, 0.10)),
    ("claude-3-5-haiku", Price(0.8, 4, 1, 1.6, 0.08)),
    ("claude-3-haiku", Price(0.25, 1.25, 0.30, 0.50, 0.03)),
)


@functools.lru_cache(maxsize=1024)  # a handful of model names, looked up once per API call
def price_for(model: str | None) -> Price | None:
    if not model:
        return None
    best: tuple[int, Price] | None = None
    for prefix, price in _PRICES:
        if model.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), price)
    return best[1] if best else None


def cost_usd(model: str | None, u: Usage) -> float | None:
    """None for a model without a known price."""
    p = price_for(model)
    if p is None:
        return None
    # Cache writes split by TTL when the transcript says so; otherwise all at the 5-minute rate.
    split = u.cache_creation_5m + u.cache_creation_1h
    w5 = u.cache_creation_5m if split else u.cache_creation_input_tokens
    w1 = u.cache_creation_1h if split else 0
    return (u.input_tokens * p.input + u.output_tokens * p.output + w5 * p.cache_write_5m
            + w1 * p.cache_write_1h + u.cache_read_input_tokens * p.cache_read) / 1e6
