"""5-hour blocks (``ccotel report blocks``), cut as ``ccusage blocks`` cuts them (rules/blocks.py),
with a gap of more than 5 hours shown as a block of its own (from 5 hours after the last call to
the next call). The active block is the one ``now`` is inside, with a call less than 5 hours ago:
its burn rate (from its first call to its last) and its projection to its end.

Pure arithmetic on the report's calls (``CallRow``, from the ledger or the transcripts): ``now``
is an argument, so a test gives its own."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ccotel.rules.blocks import BLOCK_NS, HOUR_NS, cut_blocks, is_active
from ccotel.rules.model_name import reported_model
from ccotel.store.ledger import CallRow, nano_usd

__all__ = ["HOUR_NS", "BLOCK_NS", "Block", "BurnRate", "Projection", "LimitStatus", "identify_blocks",
           "burn_rate", "projection", "token_limit", "limit_status", "js_round"]

_MINUTE_NS = 60 * 1_000_000_000


@dataclass
class Block:
    """One block: its calls' sums (a gap block has none)."""

    start_ns: int
    end_ns: int
    gap: bool = False
    active: bool = False
    first_ns: int = 0  # its first call (0: a gap)
    last_ns: int = 0  # its last call: ccusage's actualEndTime
    entries: int = 0
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    cost_nano: int = 0
    models: list[str] = field(default_factory=list)  # in the order they first answered
    unpriced: set[str] = field(default_factory=set)

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_write + self.cache_read

    @property
    def cost(self) -> float:
        return self.cost_nano / 1e9

    def add(self, c: CallRow) -> None:
        u = c.usage  # input, output, cache read, cache write, ...
        self.entries += 1
        self.input += u[0]
        self.output += u[1]
        self.cache_read += u[2]
        self.cache_write += u[3]
        name = reported_model(c.model) or "unknown"
        if name not in self.models:
            self.models.append(name)
        if c.cost is None:
            self.unpriced.add(name)
        else:
            self.cost_nano += nano_usd(c.cost)
        self.first_ns = self.first_ns or c.time_ns
        self.last_ns = c.time_ns


@dataclass(frozen=True)
class BurnRate:
    tokens_per_minute: float  # all four token kinds, as ccusage's tokensPerMinute
    tokens_per_minute_for_indicator: float  # input + output only (ccusage's indicator)
    cost_per_hour: float


@dataclass(frozen=True)
class Projection:
    """The active block at its end, if calls go on at its burn rate."""

    total_tokens: int
    total_cost: float  # USD, to the cent (as ccusage rounds it)
    remaining_minutes: int


@dataclass(frozen=True)
class LimitStatus:
    limit: int
    projected_usage: int
    percent_used: float
    status: str  # ok | warning (over 80 %) | exceeds


def js_round(x: float) -> int:
    """JavaScript's Math.round (halves up), as ccusage rounds; Python's round() halves to even."""
    return int((x + 0.5) // 1)


def identify_blocks(calls: Iterable[CallRow], now_ns: int, length_ns: int = BLOCK_NS) -> list[Block]:
    """The blocks of these calls (failed calls and calls without a time left out, rules/blocks.py
    cuts them), a gap block where more than ``length_ns`` passed without a call."""
    billed = sorted((c for c in calls if not c.api_error and c.time_ns), key=lambda c: c.time_ns)
    blocks: list[Block] = []
    last_ns = 0
    for start, first, end in cut_blocks([c.time_ns for c in billed], length_ns):
        if last_ns and billed[first].time_ns - last_ns > length_ns:
            blocks.append(Block(start_ns=last_ns + length_ns, end_ns=billed[first].time_ns, gap=True))
        b = Block(start_ns=start, end_ns=start + length_ns)
        for c in billed[first:end]:
            b.add(c)
        b.active = is_active(b.start_ns, b.last_ns, now_ns, length_ns)
        blocks.append(b)
        last_ns = b.last_ns
    # by start, as ccusage lists them: a gap starts 5 hours after the last call, which can be after
    # the hour the next block starts on (a gap from 01:05 before a block from 01:00 is listed after it)
    blocks.sort(key=lambda b: b.start_ns)
    return blocks


def burn_rate(b: Block) -> BurnRate | None:
    """Tokens and dollars per unit of time from the block's first call to its last (None: a gap,
    or a single instant)."""
    if b.gap or not b.entries or b.last_ns <= b.first_ns:
        return None
    minutes = (b.last_ns - b.first_ns) / _MINUTE_NS
    return BurnRate(b.total_tokens / minutes, (b.input + b.output) / minutes, b.cost / minutes * 60)


def projection(b: Block, now_ns: int) -> Projection | None:
    """The active block's figures at its end at its burn rate (None: not active, or no rate)."""
    rate = burn_rate(b)
    if not b.active or rate is None:
        return None
    remaining = max(0.0, (b.end_ns - now_ns) / _MINUTE_NS)
    tokens = b.total_tokens + rate.tokens_per_minute * remaining
    cost = b.cost + rate.cost_per_hour / 60 * remaining
    return Projection(js_round(tokens), js_round(cost * 100) / 100, js_round(remaining))


def token_limit(value: str | None, blocks: list[Block]) -> int | None:
    """``--token-limit``: a number, or ``max``: the most tokens a finished block used."""
    if value is None:
        return None
    if value == "max":
        done = [b.total_tokens for b in blocks if not b.gap and not b.active]
        return max(done) if done and max(done) > 0 else None
    return int(value)


def limit_status(b: Block, limit: int | None, now_ns: int) -> LimitStatus | None:
    """Where the active block's projection stands against the limit."""
    p = projection(b, now_ns)
    if limit is None or limit <= 0 or p is None:
        return None
    status = "exceeds" if p.total_tokens > limit else "warning" if p.total_tokens > limit * 0.8 else "ok"
    return LimitStatus(limit, p.total_tokens, p.total_tokens / limit * 100, status)
