"""The findings for people (a table, what to do under each finding, a verdict) and for machines
(--json).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

import orjson

from ccotel.commands.doctor.finding import Finding, Level, exit_status

__all__ = ["COSTS", "render_text", "render_json"]

# What a failed check costs, so that someone who wants reports only knows a missing backend is not
# theirs to fix (the exit status stays 1: scripts and CI rely on it for `ccotel run`'s needs).
COSTS = {
    "roots": "ccotel reads nothing there: every command misses those sessions",
    "state": "ccotel run and backfill cannot start or keep their place; report, sessions, trace and check work",
    "traces": "ccotel run, backfill and relay cannot deliver spans (they keep them and retry); report, sessions, "
              "trace and check need no backend (--traces-exporter none: metrics only)",
    "metrics": "ccotel run cannot serve /metrics there; everything else works",
    "telemetry": "Claude Code's own exporter takes ccotel's port or sends each turn twice",
}


def render_text(findings: Sequence[Finding], out: TextIO) -> None:
    """A table for people: level, check, what was found and, under it, what to do."""
    from rich.table import Table
    from rich.text import Text

    from ccotel.commands.terminal import stdout_console

    console = stdout_console(file=out)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("finding", overflow="fold")
    style = {Level.OK: "green", Level.WARN: "yellow", Level.FAIL: "bold red"}
    for f in findings:
        cell = Text()
        cell.append(f.subject, style="bold")
        cell.append(f": {f.message}")
        if f.fix:
            cell.append(f"\n→ {f.fix}", style="cyan")
        table.add_row(Text(f.level.label.upper() if f.level is Level.FAIL else f.level.label, style=style[f.level]),
                      f.check, cell)
    fails = sum(f.level is Level.FAIL for f in findings)
    warns = sum(f.level is Level.WARN for f in findings)
    failed = dict.fromkeys(f.check for f in findings if f.level is Level.FAIL)
    verdict = (f"{fails} failed" if fails else "nothing failed") + (f", {warns} warnings" if warns else "")
    verdict += "".join(f"\n{check} failed: {COSTS.get(check, 'see above')}" for check in failed)
    with console.capture() as captured:
        console.print(table)
        console.print(Text(verdict, style=style[Level.FAIL if fails else Level.WARN if warns else Level.OK]))
    # rich pads every cell to its column's width: no trailing blanks in a log or a diff
    out.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def render_json(findings: Sequence[Finding], out: TextIO) -> None:
    """The findings for machines: the worst level, the exit status, every finding with its data."""
    doc = {"status": max((f.level for f in findings), default=Level.OK).label,
           "exit_status": exit_status(findings), "findings": [f.as_dict() for f in findings]}
    out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
