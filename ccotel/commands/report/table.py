"""A report as a rich table on the terminal (rich is imported only here, and only when a table is
printed: ``--json`` does not load it)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

from ccotel.commands.report.rows import ModelTotals, Query, Report, Row, report_models
from ccotel.commands.report.summary import Dates
from ccotel.commands.terminal import dollars, left_cut, short_model
from ccotel.commands.terminal import stdout_console as console

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["render", "stdout_console"]

@dataclass(frozen=True)
class _Column:
    head: str
    footer: str
    cell: Callable[[Row], str]
    model_cell: Callable[[ModelTotals], str] | None = None  # its --breakdown line
    number: bool = True
    drop: int = 0  # 0: always shown (cost); else given up when the terminal is too narrow, highest first


def _columns(report: Report, breakdown: bool) -> list[_Column]:
    t = report.totals

    def dash(r: Row, value: str) -> str:
        """A tool, subagent or health figure: ``-`` without a ledger, ``?`` where the ledger lacks calls."""
        return value if report.knows(r) else "-" if not report.knows_tools else "?"

    return [
        _Column("Models", "", lambda r: "\n".join(_short(m) for m in sorted(r.models)), number=False,
                drop=0 if breakdown else 7),  # the breakdown's lines are named in it
        _Column("Input", f"{t.input:,}", lambda r: f"{r.input:,}", lambda m: f"{m.input:,}", drop=2),
        _Column("Output", f"{t.output:,}", lambda r: f"{r.output:,}", lambda m: f"{m.output:,}", drop=1),
        _Column("Cache\nwrite", f"{t.cache_write:,}", lambda r: f"{r.cache_write:,}", lambda m: f"{m.cache_write:,}",
                drop=3),
        _Column("Cache\nread", f"{t.cache_read:,}", lambda r: f"{r.cache_read:,}", lambda m: f"{m.cache_read:,}",
                drop=4),
        _Column("Total\ntokens", f"{t.total_tokens:,}", lambda r: f"{r.total_tokens:,}",
                lambda m: f"{m.input + m.output + m.cache_write + m.cache_read:,}", drop=11),
        _Column("Cost $", _cost(t), _cost, lambda m: dollars(m.cost)),
        _Column("Calls", f"{t.api_calls:,}", lambda r: f"{r.api_calls:,}", lambda m: f"{m.calls:,}", drop=6),
        _Column("Tools", dash(t, f"{t.tool_calls:,}"), lambda r: dash(r, f"{r.tool_calls:,}"), drop=9),
        _Column("Tool\nerrors", dash(t, f"{t.tool_errors:,}"), lambda r: dash(r, f"{r.tool_errors:,}"), drop=8),
        _Column("Sub-\nagents", dash(t, f"{t.subagents:,}"), lambda r: dash(r, f"{r.subagents:,}"), drop=10),
        _Column("Health", _health(t, report), lambda r: _health(r, report), number=False, drop=5),
    ]


def _widest(c: _Column, rows: list[Row]) -> int:
    """The width a column's cells take whole: its header, its total and every row's cell."""
    cells = [c.footer, *c.head.split("\n"), *(c.cell(r) for r in rows)]
    return max(len(line) for cell in cells for line in cell.split("\n"))


def _fit(columns: list[_Column], rows: list[Row], lead: int, width: int) -> list[_Column]:
    """The columns that fit ``width`` (``lead``: the label columns' width). A number is never cut, so
    columns give way instead, highest ``drop`` first: the token columns last, the cost never."""
    kept = list(columns)
    for c in sorted((c for c in columns if c.drop), key=lambda c: -c.drop):
        if lead + sum(_need(k, rows) for k in kept) + 1 <= width:
            break
        kept.remove(c)
    return kept


def _need(c: _Column, rows: list[Row]) -> int:
    """The width a shown column takes, with its border and padding."""
    if c.head == "Models":  # whole, with the breakdown's "└ "
        return _widest(c, rows) + 2 + 3
    return (min(_widest(c, rows[:200]), 16) if not c.number else _widest(c, rows)) + 3


def render(report: Report, console: Console, q: Query, breakdown: bool = False) -> None:
    """A rich table: one line per row, per model below it with ``breakdown``, the totals last.
    On a narrow terminal the least needed columns give way (the omitted ones are named)."""
    from rich.table import Table

    if not report.rows:  # not a table of zeros
        when = "".join(f" {word} {day.isoformat()}" for word, day in (("since", q.since), ("until", q.until)) if day)
        console.print(f"no usage found{when} (from the {report.source})")
        return
    table = Table(title=f"ccotel report: {report.view} ({_zone_name(q.tz)}; from the {report.source})",
                  show_footer=True, header_style="bold", footer_style="bold")
    # sessions are in the order of their last activity (as ccusage's): that is the time shown
    first = {"daily": "Date", "weekly": "Week of", "monthly": "Month", "session": "Last activity",
             "project": "Project"}[report.view]
    dates = Dates(q.tz)
    labels = [_label(r, report.view, dates) for r in report.rows]
    lead_width = max([len(first), 5, *(len(x) for x in labels)]) + 3
    table.add_column(first, footer="Total", overflow="fold", no_wrap=report.view != "project",
                     min_width=min(lead_width - 3, 40))
    if report.view == "session":
        lead_width += 15 + 11  # Project at its least (12), Session (8), with their borders
    columns = _columns(report, breakdown)
    # a project's path folds onto more lines (down to its min_width): it gives way before a number does
    fit_lead = min(lead_width, 40 + 3) if report.view == "project" else lead_width
    shown = _fit(columns, report.rows, fit_lead, console.width)
    # the session view's Project is context, not the row's key: one line, its start cut (… on the left)
    place_width = 12 + max(console.width - lead_width - sum(_need(c, report.rows) for c in shown) - 1, 0)
    if report.view == "session":
        table.add_column("Project", no_wrap=True, min_width=12)
        table.add_column("Session", no_wrap=True)
    for c in shown:
        if c.number:
            table.add_column(c.head, justify="right", footer=c.footer, no_wrap=True,
                             min_width=_widest(c, report.rows))  # whole: rich narrows the labels instead
        elif c.head == "Models":  # a model's name is never broken: short (short_model) and whole
            table.add_column(c.head, footer=c.footer, no_wrap=True, min_width=_widest(c, report.rows) + 2)
        else:
            table.add_column(c.head, footer=c.footer, overflow="fold", min_width=10)
    for r, label in zip(report.rows, labels, strict=True):
        lead = [label]
        if report.view == "session":
            lead += [left_cut(_place(r), place_width), (r.session_id or "")[:8]]
        table.add_row(*lead, *(c.cell(r) for c in shown))
        if breakdown:
            for model, m in report_models(r):
                cells = [(c.model_cell(m) if c.model_cell else "") for c in shown]
                if shown and shown[0].head == "Models":
                    cells[0] = f"└ {_short(model)}"
                table.add_row(*([""] * len(lead)), *cells, style="dim")
    console.print(table)
    left_out = [c.head.replace("-\n", "").replace("\n", " ") for c in columns if c not in shown]
    if left_out:
        console.print(f"(not shown at this width: {', '.join(left_out)}; --json has every column)", style="dim")
    if report.totals.unpriced:
        console.print(f"* without the calls of models that have no price: {', '.join(sorted(report.totals.unpriced))} "
                      "(give them one with --prices)")
    why = report.why_unknown()
    if why is not None:
        console.print(f"{'-' if not report.knows_tools else '?'} not known: {why}.", style="dim")


def _label(r: Row, view: str, dates: Dates) -> str:
    if view == "session":
        if not r.last_ns:
            return ""
        sec = r.last_ns / 1e9
        local = datetime.fromtimestamp(sec, dates.tz) if dates.tz else datetime.fromtimestamp(sec).astimezone()
        return local.strftime("%Y-%m-%d %H:%M")
    if view == "project":
        return _place(r)
    return r.key


def _place(r: Row) -> str:
    """Where a session ran: its cwd (a path, readable), else its projects dir."""
    path = r.cwd or r.project or "unknown"
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and path.startswith(home + "/") else path


def _short(model: str) -> str:
    return short_model(model)


def _cost(r: Row) -> str:
    return dollars(r.cost) + ("*" if r.unpriced else "")


def _health(r: Row, report: Report) -> str:
    """Orphans, kills, ghosts, resets (from the ledger: ``-``/``?`` when not known) and API errors."""
    if not report.knows_tools:
        return f"{r.api_errors} API errors" if r.api_errors else "-"
    if r.partial:
        return f"?, {r.api_errors} API errors" if r.api_errors else "?"
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in
             ((r.orphans, "orphan"), (r.kills, "kill"), (r.ghosts, "ghost"), (r.resets, "reset"),
              (r.api_errors, "API error")) if n]
    return ", ".join(parts) if parts else "ok"


def _zone_name(tz: tzinfo | None) -> str:
    return str(tz) if tz is not None else (time.tzname[0] or "local time")


def stdout_console() -> Console:
    """The commands' console (terminal.stdout_console: one width rule for every command)."""
    return console()
