"""The prices of the status line's new calls without loading ``ccotel.spans.pricing`` (dataclasses,
orjson, records, hashlib: more than the rest of the line costs), which is loaded for a model not
seen yet and once a month: the price it chose for a (model, day) is kept in
``statusline/prices.memo.json`` under the state, for that day and the month after it, for every
model kept (the table's prices change on UTC dates it already holds, so a later day is priced
exactly as on that day; yesterday's stay for a session across midnight, older days are dropped),
with the genai-prices table it came from (its data file's path, size and mtime) and the Python
that ran it; another table or Python drops them all. A call of a model and day found there is
priced here with pricing's arithmetic (``Price.cost_of``: the same floats, in the same order;
tests hold the two equal). A call without a time is priced by pricing itself (as pricing keeps
no day for it)."""

from __future__ import annotations

import os
import sys

from ccotel.commands.statusline.fastjson import loads, save

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PriceMemo", "cost_at"]

_VERSION = 1
_DAY_NS = 86_400 * 1_000_000_000
_AHEAD_DAYS = 31


def _rate(rate: list[Any], total_input: int) -> float:
    """Rate.at: the base, or the last tier whose threshold the call's whole input exceeds."""
    value = float(rate[0])
    for start, tier_rate in rate[1]:
        if total_input > int(start):
            value = float(tier_rate)
    return value


def cost_at(rates: list[Any], usage: tuple[int, ...] | list[int]) -> float:
    """Price.cost_of for a price as pricing.price_as_json gives it and a usage whose first six are
    (input, output, cache read, cache write, 5m write, 1h write)."""
    fresh, output, cache_read, cache_write, write_5m, write_1h = usage[:6]
    w1 = write_1h if write_5m + write_1h else 0  # cache writes split by TTL when the transcript says so
    w5 = cache_write - w1
    total = fresh + cache_read + cache_write
    i, o, c5, c1, r = (_rate(x, total) for x in rates)
    return (fresh * i + output * o + w5 * c5 + w1 * c1 + cache_read * r) / 1e6


class PriceMemo:
    """Prices per (model, UTC day) from the file at ``path`` (None: none kept); ``save`` writes it
    back when a price was added."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.prices: dict[str, Any] = {}
        self.table: list[Any] | None = None
        self.added = False
        doc = self._read()
        if doc is not None:
            self.prices, self.table = doc["prices"], doc["table"]

    def _read(self) -> Any:
        if not self.path:
            return None
        try:
            with open(self.path, "rb") as f:
                doc = loads(f.read())
            table = doc["table"]
            if doc["v"] != _VERSION or doc["python"] != sys.prefix or not isinstance(doc["prices"], dict) \
                    or not _same_table(table):
                return None
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            return None  # no file, a broken one, another version: prices are looked up again
        return doc

    def cost_of(self, model: str | None, usage: tuple[int, ...] | list[int], at_ns: int | None) -> float | None:
        """Pricing.cost_of(model, usage, at_ns) of the default pricing."""
        if not model:
            return None
        if not at_ns:
            from ccotel.spans.pricing import DEFAULT_PRICING

            return DEFAULT_PRICING.cost_of(model, tuple(usage), at_ns)
        key = f"{at_ns // _DAY_NS} {model}"
        if key in self.prices:
            try:
                rates = self.prices[key]
                return None if rates is None else cost_at(rates, usage)
            except (TypeError, ValueError, IndexError):
                pass  # a broken entry: priced again below
        from ccotel.spans.pricing import DEFAULT_PRICING, price_as_json, price_table_file

        rates = price_as_json(DEFAULT_PRICING.price(model, at_ns))
        if self.table is None or not _same_table(self.table):
            self.prices, self.table = {}, _table(price_table_file())
        self.prices[key] = rates
        day = at_ns // _DAY_NS
        models = {k.partition(" ")[2] for k in self.prices}
        kept = {k: v for k, v in self.prices.items() if int(k.partition(" ")[0]) >= day - 1}
        for d in range(day, day + _AHEAD_DAYS):
            for m in models:
                if f"{d} {m}" not in kept:
                    kept[f"{d} {m}"] = price_as_json(DEFAULT_PRICING.price(m, d * _DAY_NS))
        self.prices = kept
        self.added = True
        return None if rates is None else cost_at(rates, usage)

    def save(self) -> None:
        if not self.path or not self.added:
            return
        # none kept: the next new call loads pricing again, never a wrong price
        save(self.path, {"v": _VERSION, "python": sys.prefix, "table": self.table, "prices": self.prices})


def _table(path: str | None) -> list[Any]:
    """genai-prices' table as [data file, size, mtime ns] ([None]: not installed)."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    return [path, st.st_size, st.st_mtime_ns] if st is not None else [None]


def _same_table(table: Any) -> bool:
    return isinstance(table, list) and bool(table) and _table(table[0]) == table
