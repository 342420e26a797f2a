"""``ccotel report blocks``: the 5-hour blocks (blocks.py) of the report's calls as JSON shaped like
``ccusage blocks --json`` or as a table that fits the terminal, the active block's time left,
burn rate and projection under it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING, Any

import orjson

from ccotel.commands.report.blocks import (
    Block,
    burn_rate,
    identify_blocks,
    limit_status,
    projection,
    token_limit,
)
from ccotel.commands.report.rows import Data, Query

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["BlocksReport", "blocks_report", "as_json", "render", "print_blocks"]


@dataclass(frozen=True)
class BlocksReport:
    blocks: list[Block]  # in the order asked (gaps between), only the active one with --active
    now_ns: int
    limit: int | None
    source: str


def blocks_report(data: Data, q: Query, now_ns: int, limit_arg: str | None = None,
                  active_only: bool = False) -> BlocksReport:
    """The blocks of the report's calls; --since/--until keep the blocks that start on those days
    (in the report's time zone)."""
    blocks = identify_blocks(data.calls, now_ns)
    limit = token_limit(limit_arg, blocks)
    if q.since is not None or q.until is not None:
        blocks = [b for b in blocks if _inside(b.start_ns, q)]
    if active_only:
        blocks = [b for b in blocks if b.active]
    if q.order == "desc":
        blocks.reverse()
    return BlocksReport(blocks, now_ns, limit, data.source)


def _inside(ns: int, q: Query) -> bool:
    d = _local(ns, q.tz).date()
    return (q.since is None or d >= q.since) and (q.until is None or d <= q.until)


def _local(ns: int, tz: tzinfo | None) -> datetime:
    t = datetime.fromtimestamp(ns / 1e9, tz) if tz is not None else datetime.fromtimestamp(ns / 1e9).astimezone()
    return t


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _block_json(b: Block, r: BlocksReport) -> dict[str, Any]:
    rate = burn_rate(b) if b.active else None  # ccusage gives the rate of the active block only
    p = projection(b, r.now_ns)
    doc: dict[str, Any] = {
        "id": f"gap-{_iso(b.start_ns)}" if b.gap else _iso(b.start_ns),
        "startTime": _iso(b.start_ns), "endTime": _iso(b.end_ns),
        "actualEndTime": _iso(b.last_ns) if b.last_ns else None,
        "isActive": b.active, "isGap": b.gap, "entries": b.entries,
        "tokenCounts": {"inputTokens": b.input, "outputTokens": b.output,
                        "cacheCreationInputTokens": b.cache_write, "cacheReadInputTokens": b.cache_read},
        "totalTokens": b.total_tokens, "costUSD": round(b.cost, 6), "models": list(b.models),
        "unpricedModels": sorted(b.unpriced),
        "burnRate": None if rate is None else {
            "tokensPerMinute": rate.tokens_per_minute,
            "tokensPerMinuteForIndicator": rate.tokens_per_minute_for_indicator,
            "costPerHour": rate.cost_per_hour},
        "projection": None if p is None else {
            "totalTokens": p.total_tokens, "totalCost": p.total_cost, "remainingMinutes": p.remaining_minutes},
    }
    status = limit_status(b, r.limit, r.now_ns)
    if status is not None:
        doc["tokenLimitStatus"] = {"limit": status.limit, "projectedUsage": status.projected_usage,
                                   "percentUsed": status.percent_used, "status": status.status}
    return doc


def as_json(r: BlocksReport) -> dict[str, Any]:
    """``ccusage blocks --json``'s shape (its field names), plus unpricedModels and the source."""
    return {"blocks": [_block_json(b, r) for b in r.blocks], "source": r.source}


# == the table ====================================================================================


def _minutes(ns: int) -> str:
    m = max(0, ns) // 60_000_000_000
    if m >= 48 * 60:
        return f"{m // 1440}d {m % 1440 // 60}h"
    return f"{m // 60}h {m % 60:02d}m"


def _status(b: Block, now_ns: int) -> str:
    if b.gap:
        return f"gap {_minutes(b.end_ns - b.start_ns)}"
    if b.active:
        return f"ACTIVE {_minutes(b.end_ns - now_ns)} left"
    return _minutes(b.last_ns - b.start_ns)


def _short(model: str) -> str:
    return model[len("claude-"):] if model.startswith("claude-") else model


def _cost(b: Block) -> str:
    return f"{b.cost:,.2f}" + ("*" if b.unpriced else "")


def render(r: BlocksReport, console: Console, tz: tzinfo | None) -> None:
    """One line per block (gaps dim), the active block's rate and projection under the table. On a
    narrow terminal the models, then the percentage of the limit, give way; a number never does."""
    from rich.table import Table

    starts = [_local(b.start_ns, tz).strftime("%Y-%m-%d %H:%M") for b in r.blocks]
    states = [_status(b, r.now_ns) for b in r.blocks]
    tokens = [f"{b.total_tokens:,}" if not b.gap else "" for b in r.blocks]
    costs = [_cost(b) if not b.gap else "" for b in r.blocks]
    percents = [f"{b.total_tokens / r.limit * 100:.1f}%" if r.limit and not b.gap else "" for b in r.blocks]
    models = [", ".join(_short(m) for m in b.models) for b in r.blocks]

    def width(head: str, cells: list[str]) -> int:
        return max([len(head), *(len(c) for c in cells)]) + 3

    fixed = width("Block start", starts) + width("Status", states) + width("Tokens", tokens) \
        + width("Cost $", costs) + 1
    show_percent = r.limit is not None and fixed + width("% of limit", percents) <= console.width
    if show_percent:
        fixed += width("% of limit", percents)
    show_models = fixed + 3 + 12 <= console.width  # the models fold onto more lines, down to 12
    title = "ccotel report: blocks of 5 hours" + (f", token limit {r.limit:,}" if r.limit else "") \
        + f" (from the {r.source})"
    table = Table(title=title, header_style="bold")
    table.add_column("Block start", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    if show_models:
        table.add_column("Models", overflow="fold")
    table.add_column("Tokens", justify="right", no_wrap=True, min_width=width("Tokens", tokens) - 3)
    if show_percent:
        table.add_column("% of limit", justify="right", no_wrap=True)
    table.add_column("Cost $", justify="right", no_wrap=True, min_width=width("Cost $", costs) - 3)
    for i, b in enumerate(r.blocks):
        cells = [starts[i], states[i]] + ([models[i]] if show_models else []) + [tokens[i]] \
            + ([percents[i]] if show_percent else []) + [costs[i]]
        table.add_row(*cells, style="dim" if b.gap else ("bold green" if b.active else None))
    console.print(table)
    left_out = [name for name, shown in (("Models", show_models), ("% of limit", show_percent or r.limit is None))
                if not shown]
    if left_out:
        console.print(f"(not shown at this width: {', '.join(left_out)}; --json has every column)", style="dim")
    for b in r.blocks:
        if b.active:
            _active_lines(b, r, console, tz)
    if any(b.unpriced for b in r.blocks):
        console.print("* without the calls of models that have no price (give them one with --prices)")


def _active_lines(b: Block, r: BlocksReport, console: Console, tz: tzinfo | None) -> None:
    rate, p = burn_rate(b), projection(b, r.now_ns)
    console.print(f"Active block: {_minutes(b.end_ns - r.now_ns)} left (ends "
                  f"{_local(b.end_ns, tz).strftime('%H:%M')}), {b.total_tokens:,} tokens, ${b.cost:,.2f}")
    if rate is not None:
        console.print(f"Burn rate: {rate.tokens_per_minute * 60:,.0f} tokens/h, ${rate.cost_per_hour:,.2f}/h")
    if p is not None:
        line = f"Projected at its end: {p.total_tokens:,} tokens, ${p.total_cost:,.2f}"
        status = limit_status(b, r.limit, r.now_ns)
        if status is not None:
            line += f" ({status.percent_used:.1f}% of {status.limit:,}: {status.status})"
        console.print(line, style="red" if status is not None and status.status == "exceeds" else None)


def print_blocks(data: Data, q: Query, args: argparse.Namespace, now_ns: int) -> int:
    """``ccotel report blocks``: print the blocks (a table, or JSON with --json). Exit 0."""
    r = blocks_report(data, q, now_ns, getattr(args, "token_limit", None), getattr(args, "active", False))
    if args.json:
        sys.stdout.write(orjson.dumps(as_json(r), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    from ccotel.commands.report.table import stdout_console

    console = stdout_console()
    if not r.blocks:
        console.print("No active block." if getattr(args, "active", False) else "No calls.")
        return 0
    render(r, console, q.tz)
    return 0
