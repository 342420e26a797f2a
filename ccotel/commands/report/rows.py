"""The records of ``ccotel report``: what a report asks (``Query``), what it sums (``Data``), and
what it gives (``Row`` per day, week, month, session or project, their ``Report``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, tzinfo
from typing import NamedTuple

from ccotel.rules.model_name import reported_model
from ccotel.store.ledger import AgentRow, CallRow, ToolRow, TurnRow

__all__ = ["Query", "CallSums", "Summed", "Data", "ModelTotals", "Row", "Report", "report_models"]

# == the views: daily, weekly, monthly, session, project ==========================================
#
# Calls come from the ledger (history Claude Code may have deleted since) and, for the files
# written since the ledger was last written, from the transcripts (transcripts.py); a call in
# both is the ledger's (one key, counted once). Tool calls, subagents and health come from the
# ledger only: the transcript reader reads assistant lines alone. A row with a call the ledger
# lacks (a first catch-up still filling it, a time ccotel did not record) does not know them:
# ``Row.partial``, shown as unknown with ``Report.unknown_reason``, never as a count of 0.

# The records are NamedTuples and __slots__ classes, not dataclasses: a report the ledger answers
# alone loads this module, and creating dataclasses (and importing the module) is a noticeable
# part of its start (bench/NOTES.md).


class Query(NamedTuple):
    """What a report asks: a view, a time zone (None: the system's), dates (inclusive, local)."""

    view: str = "session"
    tz: tzinfo | None = None
    since: date | None = None
    until: date | None = None
    start_of_week: int = 6  # date.weekday(): sunday, as ccusage
    order: str = "asc"


# Calls summed per (session, model, failed, slot): calls, the seven usage sums, calls with a cost,
# their cost in nano-dollars, the earliest non-zero time (0: none) and the latest (summary.call_sums).
CallSums = dict[tuple[str, str | None, bool, int], list[int]]


class Summed(NamedTuple):
    """Calls summed as they were read, group by group (transcripts.py without a ledger): per
    quarter hour (slot: time // ledger.SLOT_NS), in the order each sum's first call comes, and
    each session's places (summary.place_items), in the calls' order."""

    sums: CallSums
    places: list[tuple[str, str | None, str | None]]


class Data(NamedTuple):
    """Everything a report sums: calls (ledger and transcripts, once each) and the ledger's rows."""

    calls: list[CallRow]
    tools: list[ToolRow]
    agents: list[AgentRow]
    turns: list[TurnRow]
    source: str  # ledger | transcripts | ledger+transcripts
    # Calls read from the transcripts that the ledger does not hold (and will not: not a turn
    # still open): their rows' tool calls, subagents and health are not known; and why.
    unrecorded: Sequence[CallRow] = ()
    unknown_reason: str | None = None
    summed: Summed | None = None  # the calls summed rather than listed (``calls`` is then empty)


class ModelTotals:
    """One model's figures in a row."""

    __slots__ = ("input", "output", "cache_write", "cache_read", "calls", "cost_nano")

    def __init__(self) -> None:
        self.input = 0
        self.output = 0
        self.cache_write = 0
        self.cache_read = 0
        self.calls = 0
        self.cost_nano = 0  # nano-dollars (ledger.nano_usd): summed exactly, in any order

    @property
    def cost(self) -> float:
        """USD (the sum divided once)."""
        return self.cost_nano / 1e9

    def add(self, other: ModelTotals) -> None:
        self.input += other.input
        self.output += other.output
        self.cache_write += other.cache_write
        self.cache_read += other.cache_read
        self.calls += other.calls
        self.cost_nano += other.cost_nano


class Row:
    """One line of a report (a day, a week, a month, a session or a project), summed as it goes."""

    __slots__ = ("key", "input", "output", "cache_read", "cache_write", "cache_write_5m", "cache_write_1h",
                 "reasoning", "cost_nano", "api_calls", "api_errors", "tool_calls", "tool_errors", "subagents",
                 "orphans", "kills", "ghosts", "resets", "first_ns", "last_ns", "models", "unpriced", "by_model",
                 "session_id", "project", "cwd", "partial")

    def __init__(self, key: str) -> None:
        self.key = key
        self.input = 0
        self.output = 0
        self.cache_read = 0
        self.cache_write = 0
        self.cache_write_5m = 0
        self.cache_write_1h = 0
        self.reasoning = 0
        self.cost_nano = 0  # nano-dollars (ledger.nano_usd): summed exactly, in any order
        self.api_calls = 0
        self.api_errors = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.subagents = 0
        self.orphans = 0
        self.kills = 0
        self.ghosts = 0
        self.resets = 0
        self.first_ns = 0
        self.last_ns = 0
        self.models: set[str] = set()
        self.unpriced: set[str] = set()
        self.by_model: dict[str, ModelTotals] = {}
        self.session_id: str | None = None
        self.project: str | None = None
        self.cwd: str | None = None
        self.partial = False  # holds a call the ledger lacks: its tool, subagent and health figures are not known

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    @property
    def cost(self) -> float:
        """USD (the sum divided once)."""
        return self.cost_nano / 1e9

    def seen(self, ns: int) -> None:
        if ns:
            self.first_ns = min(self.first_ns, ns) if self.first_ns else ns
            self.last_ns = max(self.last_ns, ns)

    def add_calls(self, model: str | None, failed: bool, n: int, usage: Sequence[int], priced: int,
                  cost: int, first_ns: int, last_ns: int) -> None:
        """``n`` calls of one model (their sums; ``cost`` in nano-dollars, ``priced`` of them with a
        price), from the ledger's totals or summary.call_sums."""
        self.seen(first_ns)
        self.seen(last_ns)
        if failed:
            self.api_errors += n
            return
        self._add_usage(usage, n, cost)
        name = reported_model(model) or "unknown"
        self.models.add(name)
        if priced < n:
            self.unpriced.add(name)
        m = self.by_model.get(name)
        if m is None:
            m = self.by_model[name] = ModelTotals()
        m.input += usage[0]
        m.output += usage[1]
        m.cache_write += usage[3]
        m.cache_read += usage[2]
        m.calls += n
        m.cost_nano += cost

    def _add_usage(self, usage: Sequence[int], calls: int, cost_nano: int) -> None:
        """Add calls' token sums (in UsageTuple's order: input, output, cache read, cache creation,
        its 5m and 1h parts, reasoning), their number and their cost in nano-dollars."""
        self.input += usage[0]
        self.output += usage[1]
        self.cache_read += usage[2]
        self.cache_write += usage[3]
        self.cache_write_5m += usage[4]
        self.cache_write_1h += usage[5]
        self.reasoning += usage[6]
        self.api_calls += calls
        self.cost_nano += cost_nano

    def merge(self, other: Row) -> None:
        """Add another row's figures (the totals line)."""
        self._add_usage((other.input, other.output, other.cache_read, other.cache_write, other.cache_write_5m,
                         other.cache_write_1h, other.reasoning), other.api_calls, other.cost_nano)
        self.api_errors += other.api_errors
        self.tool_calls += other.tool_calls
        self.tool_errors += other.tool_errors
        self.subagents += other.subagents
        self.orphans += other.orphans
        self.kills += other.kills
        self.ghosts += other.ghosts
        self.resets += other.resets
        self.partial = self.partial or other.partial
        self.seen(other.first_ns)
        self.seen(other.last_ns)
        self.models |= other.models
        self.unpriced |= other.unpriced
        for model, m in other.by_model.items():
            self.by_model.setdefault(model, ModelTotals()).add(m)

    def health(self) -> dict[str, int]:
        return {"orphans": self.orphans, "kills": self.kills, "ghostSessions": self.ghosts, "resets": self.resets}


class Report(NamedTuple):
    view: str
    rows: list[Row]
    totals: Row
    source: str
    unknown_reason: str | None = None  # why rows are ``partial``

    @property
    def knows_tools(self) -> bool:
        """Tools, subagents and health come from the ledger: read from the transcripts alone (no
        ledger) a report sums the calls only, and these figures are unknown, not 0."""
        return self.source != "transcripts"

    def knows(self, r: Row) -> bool:
        """Are row ``r``'s tool calls, tool errors, subagents and health known?"""
        return self.knows_tools and not r.partial

    def why_unknown(self) -> str | None:
        """Why some rows' tool, subagent and health figures are unknown (None: all are known)."""
        if not self.knows_tools:
            return ("no usage ledger was used: tool calls, subagents and health come from the ledger, which "
                    "`ccotel run` and `ccotel backfill` write")
        return self.unknown_reason if self.totals.partial else None



def report_models(r: Row) -> list[tuple[str, ModelTotals]]:
    return sorted(r.by_model.items(), key=lambda mt: -mt[1].cost_nano)
