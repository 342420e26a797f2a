"""Estimated cost of an API call from its usage, at list prices.

The prices come from ``genai-prices`` (MIT, by Pydantic): a maintained table that knows new
models as they ship, with historical prices and context tiers; a JSON file given with
``--prices`` overrides it per model. ``genai-prices`` decides *which* price applies (the model
matched by its id and the call's date); the arithmetic is done here on floats, because its
own Decimal-based calculation is slow for a single call and a report prices hundreds of thousands
(``tests/spans/test_pricing.py`` holds the two equal). A model without a price is never $0: the cost
is None and the caller flags it (span attribute, report column, metric).

Claude Code's own ``costUSD`` figures exist only in 2.1.3xx ``cost-state`` lines and on the
stream-json stdout; they are shown beside this estimate, never instead of it.

Importing genai-prices costs CPU time and memory (pydantic) in every process that prices
(each backfill worker, each report). The prices it chose are kept on disk per (model, UTC day) in
``$XDG_CACHE_HOME/ccotel/prices-<id>.jsonl``, ``<id>`` naming the installed genai-prices table (its
data file's path, size and mtime: a new version is a new file), so a process whose models and
days were priced before never imports it. A day is the unit because genai-prices' Anthropic
prices change on UTC dates (``StartDateConstraint``); calls without a time are not kept there.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import orjson

from ccotel.hashing import sha256
from ccotel.records import Usage
from ccotel.spans.price_table import price_table_file

__all__ = ["Price", "Pricing", "PriceCache", "PriceFileError", "DEFAULT_PRICING", "default_cache_path",
           "load_overrides", "MAX_PRICE", "MAX_PRICE_FILE", "price_table_file", "price_as_json", "price_from_json"]

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
    # The five base rates when none has tiers (most models): a cost is then five products, not
    # five Rate.at calls (a report prices every call; the figures are the same floats).
    _flat: tuple[float, float, float, float, float] | None = field(default=None, init=False, compare=False,
                                                                     repr=False)
    # The lowest tier threshold of the five rates: a call whose whole input is not above it is
    # priced at the base rates too (Rate.at's rule), without the five lookups.
    _base_up_to: int = field(default=-1, init=False, compare=False, repr=False)
    _base: tuple[float, float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0, 0.0), init=False,
                                                           compare=False, repr=False)

    def __post_init__(self) -> None:
        rates = (self.input, self.output, self.cache_write_5m, self.cache_write_1h, self.cache_read)
        if not any(r.tiers for r in rates):
            object.__setattr__(self, "_flat", tuple(r.base for r in rates))
        else:
            object.__setattr__(self, "_base", tuple(r.base for r in rates))
            object.__setattr__(self, "_base_up_to", min(start for r in rates for start, _rate in r.tiers))

    def cost(self, u: Usage) -> float:
        return self.cost_of(u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens,
                            u.cache_creation_5m, u.cache_creation_1h)

    def cost_of(self, fresh: int, output: int, cache_read: int, cache_write: int, write_5m: int,
                write_1h: int) -> float:
        """The cost of a usage given as Usage's first six fields."""
        # Cache writes split by TTL when the transcript says so; otherwise all at the 5-minute rate.
        w1 = write_1h if write_5m + write_1h else 0
        w5 = cache_write - w1
        flat = self._flat
        if flat is None:
            total_input = fresh + cache_read + cache_write
            if total_input <= self._base_up_to:
                flat = self._base
        if flat is not None:
            return (fresh * flat[0] + output * flat[1] + w5 * flat[2] + w1 * flat[3] + cache_read * flat[4]) / 1e6
        return (fresh * self.input.at(total_input) + output * self.output.at(total_input)
                + w5 * self.cache_write_5m.at(total_input) + w1 * self.cache_write_1h.at(total_input)
                + cache_read * self.cache_read.at(total_input)) / 1e6


def _rate_json(r: Rate) -> list[Any]:
    return [r.base, [list(t) for t in r.tiers]]


def _price_json(p: Price | None) -> list[Any] | None:
    """A genai-prices Price as JSON (floats round-trip exactly through their repr)."""
    if p is None:
        return None
    return [_rate_json(r) for r in (p.input, p.output, p.cache_write_5m, p.cache_write_1h, p.cache_read)]


def price_from_json(v: Any) -> Price | None:
    """``price_as_json``'s inverse."""
    if v is None:
        return None
    i, o, w5, w1, r = (Rate(float(b), tuple((int(t[0]), float(t[1])) for t in tiers)) for b, tiers in v)
    return Price(i, o, w5, w1, r)


def price_as_json(p: Price | None) -> list[Any] | None:
    """A price as the disk cache keeps it: the five rates (input, output, cache write 5m and 1h,
    cache read), each ``[base, [[threshold, rate], ...]]``; None for no price."""
    return _price_json(p)


def default_cache_path(env: dict[str, str] | None = None) -> str | None:
    """Where the prices genai-prices chose are kept, for the installed genai-prices (None: it is
    not installed). Found without importing it."""
    env = dict(os.environ) if env is None else env
    data = price_table_file()
    if data is None:
        return None
    try:
        st = os.stat(data)
    except OSError:
        return None
    table = sha256(f"{os.path.realpath(data)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ccotel", f"prices-{table}.jsonl")


class PriceCache:
    """genai-prices' answers per (model, UTC day) in a file of JSON lines ``[day, model, price]``,
    read once, appended to (one short O_APPEND write per lookup: processes writing at once do
    not clobber each other, and a history of many days costs one line each, not a rewrite). A
    line that does not parse is skipped: any error costs a lookup, never a wrong price."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[tuple[int, str], Any] | None = None  # read on first use

    def get(self, model: str, day: int) -> tuple[bool, Price | None]:
        """(found, price): found False when this model and day were never looked up."""
        entries = self._entries()
        if (day, model) not in entries:
            return False, None
        try:
            value = entries[(day, model)]
            return True, price_from_json(orjson.loads(value)[2] if isinstance(value, bytes) else value)
        except (TypeError, ValueError):
            return False, None  # a line written by hand or cut short: look it up again

    def put(self, model: str, day: int, price: Price | None, keep: bool = True) -> None:
        """``keep`` False: in memory only (whoever answered has written it to the file)."""
        self._entries()[(day, model)] = _price_json(price)
        if self.path is None or not keep:
            return
        line = (json.dumps([day, model, _price_json(price)]) + "\n").encode()
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            pass  # a read-only home: prices are still right, only looked up each time

    def _entries(self) -> dict[tuple[int, str], Any]:
        if self.entries is None:
            self.entries = {}
            if self.path is not None:
                try:
                    with open(self.path, "rb") as f:
                        lines = f.read().splitlines()
                except OSError:
                    lines = []
                for raw in lines:
                    try:
                        day, model, price = orjson.loads(raw)  # a full cache read by json took several times as long
                    except (ValueError, TypeError):
                        continue
                    if isinstance(day, int) and isinstance(model, str):
                        # the line's bytes until asked: decoded, a price is ~700 bytes, and every
                        # process (each catch-up worker) reads every line of the cache
                        self.entries[(day, model)] = raw
        return self.entries


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


class PriceFileError(ValueError):
    """A ``--prices`` file that cannot be used; the message names the file and what is wrong."""


MAX_PRICE_FILE = 1 << 20  # bytes: a table of model prices is a few KB
# USD per million tokens: far above any model's list price, and low enough that no usage a
# transcript can hold makes a cost overflow (1e308 made inf, inf - inf made NaN in the counters).
MAX_PRICE = 1_000_000.0
_PRICE_KEYS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")


def _read_price_file(path: str) -> bytes:
    """The file's bytes, refused unless it is a regular file of at most MAX_PRICE_FILE bytes.
    Opened without blocking and checked before reading: a FIFO would wait for a writer forever,
    /dev/zero never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise PriceFileError(f"--prices {path}: cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PriceFileError(f"--prices {path}: not a regular file")
        if st.st_size > MAX_PRICE_FILE:
            raise PriceFileError(f"--prices {path}: {st.st_size} bytes, more than a prices file has "
                                 f"(at most {MAX_PRICE_FILE})")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_PRICE_FILE + 1)
    except OSError as exc:
        raise PriceFileError(f"--prices {path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_PRICE_FILE:  # grew after the check
        raise PriceFileError(f"--prices {path}: more than {MAX_PRICE_FILE} bytes")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a price")  # json's NaN / Infinity / -Infinity


def _checked_price(path: str, model: str, p: dict[str, Any], key: str) -> float:
    v = p[key]
    # bool is an int to Python; a price written as true is a mistake, not 1 USD. The range is
    # checked before finiteness: an int too large for a float would raise in math.isfinite.
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_PRICE or not math.isfinite(v):
        raise PriceFileError(f"--prices {path}: {model!r} {key} must be a number of USD per million tokens from 0 "
                             f"to {MAX_PRICE:,.0f}, not {v!r}")
    return float(v)


def load_overrides(path: str) -> dict[str, Price]:
    """``{"model-id-or-prefix": {"input": 5, "output": 25, "cache_read": 0.5, "cache_write_5m": 6.25,
    "cache_write_1h": 10}}`` in USD per million tokens; the longest matching prefix wins. Every
    price is checked here, where the file is loaded (``PriceFileError``): finite, not negative,
    at most MAX_PRICE; a cost made of them is then always a finite number."""
    try:
        raw = json.loads(_read_price_file(path), parse_constant=_no_constant)
    except ValueError as exc:
        if isinstance(exc, PriceFileError):
            raise
        raise PriceFileError(f"--prices {path}: not JSON ({exc})") from None
    except RecursionError:  # arrays or objects nested deeper than json can parse: no price table is
        raise PriceFileError(f"--prices {path}: nested too deeply to be a table of prices") from None
    if not isinstance(raw, dict):
        raise PriceFileError(f"--prices {path}: expected an object of model -> prices")
    out = {}
    for model, p in raw.items():
        if not isinstance(p, dict) or "input" not in p or "output" not in p:
            raise PriceFileError(f"--prices {path}: {model!r} needs numeric input and output prices")
        prices = {k: _checked_price(path, model, p, k) for k in _PRICE_KEYS if k in p}
        inp = prices["input"]
        out[str(model)] = Price(Rate(inp), Rate(prices["output"]), Rate(prices.get("cache_write_5m", inp * 1.25)),
                                Rate(prices.get("cache_write_1h", inp * 2)), Rate(prices.get("cache_read", inp * 0.1)),
                                source=f"file:{path}")
    return out


@dataclass(eq=False)
class Pricing:
    """Prices per model and day: overrides first, then genai-prices (through the disk cache at
    ``cache_path``; None: the default path, "": none). Lookups are cached per (model, UTC day):
    a handful of models, one lookup each per day of history. ``lookup``: who answers what the
    disk cache does not hold, in place of genai-prices imported here (a catch-up worker asks the
    process that started it, run/prices.py); it keeps its answers on disk itself."""

    overrides: dict[str, Price] = field(default_factory=dict)
    cache_path: str | None = None
    lookup: Callable[[str, int | None], Price | None] | None = field(default=None, repr=False)
    _cache: dict[tuple[str, int], Price | None] = field(default_factory=dict, repr=False)
    _disk: PriceCache | None = field(default=None, repr=False)

    def price(self, model: str | None, at_ns: int | None = None) -> Price | None:
        if not model:
            return None
        day = (at_ns or 0) // _DAY_NS
        key = (model, day)
        if key in self._cache:
            return self._cache[key]
        found = self._override(model)
        if found is None:
            found = self._genai_price(model, at_ns, day)
        if len(self._cache) > 65_536:
            self._cache.clear()
        self._cache[key] = found
        return found

    def cost(self, model: str | None, u: Usage, at_ns: int | None = None) -> float | None:
        """USD, or None for a model without a known price."""
        p = self.price(model, at_ns)
        return None if p is None else p.cost(u)

    def cost_of(self, model: str | None, usage: tuple[int, ...], at_ns: int | None = None) -> float | None:
        """``cost`` of a usage given as a tuple of Usage's fields (the report's calls)."""
        p = self.price(model, at_ns)
        return None if p is None else p.cost_of(usage[0], usage[1], usage[2], usage[3], usage[4], usage[5])

    def _override(self, model: str) -> Price | None:
        best = max((m for m in self.overrides if model.startswith(m)), key=len, default=None)
        return self.overrides[best] if best is not None else None

    def listed_price(self, model: str, at_ns: int | None) -> Price | None:
        """genai-prices' price of ``model`` at ``at_ns`` (through the disk cache), overrides aside."""
        return self._genai_price(model, at_ns, (at_ns or 0) // _DAY_NS)

    def _genai_price(self, model: str, at_ns: int | None, day: int) -> Price | None:
        ask = self.lookup or _from_genai_prices
        if not at_ns:  # no time: genai-prices prices it as of now, which is no day to keep
            return ask(model, at_ns)
        if self._disk is None:
            self._disk = PriceCache(default_cache_path() if self.cache_path is None else self.cache_path or None)
        found, price = self._disk.get(model, day)
        if not found:
            price = ask(model, at_ns)
            self._disk.put(model, day, price, keep=self.lookup is None)
        return price


# One shared table for callers that take no --prices file (its caches are its only state).
DEFAULT_PRICING = Pricing()
