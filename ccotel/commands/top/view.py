"""``ccotel top``: the sessions running now, refreshing in place (no trace backend needed).

One row per session (commands/top/rows.py: what a row says and where it comes from): its project,
model, turn, tokens, tokens and $ per minute, the tool running and for how long, the subagents
running, and a state in red when it needs a look (stalled, orphaned, killed, ...). Keys: ``s``
cycles the order, up/down (or j/k) select a session, ``t`` or Enter shows its current turn as
``ccotel trace`` draws it (``q`` goes back), ``q`` quits. Off a terminal, or with ``--once``, one
frame is printed and the command ends; ``--json`` prints that frame's rows as JSON.

The table fits the terminal as the ``sessions`` table does: columns give way whole, in a fixed
order, and are named under it; a number is never cut; the project's path is cut from the left.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ccotel.commands.options import MAX_WAIT_S, add_stall_timeout, finite
from ccotel.commands.sessions import _ago, _compact, options_from_args
from ccotel.commands.terminal import columns, dollars, fit_with_path, left_cut, short_model, stdout_console
from ccotel.commands.top.rows import Sort, TopRow, Watcher, sort_rows
from ccotel.commands.trace import _duration, render_turn, select_turn, turns_of

__all__ = ["add_arguments", "frame", "render_rows", "run"]

_COLUMNS = ("session", "project", "model", "turn", "tokens", "tok/min", "$/min", "cost", "tool", "agents", "last",
            "state")
# Given up whole, first first, when the terminal is too narrow. Session, project, turn, $/min, the
# running tool and the state always stay.
_GIVE_WAY = ("model", "tok/min", "tokens", "last", "agents", "cost")
_RIGHT = {"turn", "tokens", "tok/min", "$/min", "cost", "agents", "last"}
_MIN_PROJECT = 12
# Widths the tool and state columns keep from frame to frame ("Bash 12.34s +3", "orphaned"), so that a
# running tool's time growing, or a state turning, does not make other columns come and go.
_STEADY = {"tool": 14, "state": 8}
_TOOL_NAME = 14  # a tool's name is cut past this (never its duration)
_SORT_NAMES = {"cost-rate": Sort.COST_RATE, "tokens": Sort.TOKENS, "last": Sort.LAST, "project": Sort.PROJECT}
_STATE_STYLE = {"live": "green", "open": "yellow", "interrupted": "yellow"}


def _tool_cell(r: TopRow, now_ns: int) -> str:
    if r.tool is None or r.tool_started_ns is None:
        return ""
    name = r.tool if len(r.tool) <= _TOOL_NAME else r.tool[:_TOOL_NAME - 1] + "…"
    more = f" +{r.tools_running - 1}" if r.tools_running > 1 else ""
    return f"{name} {_duration(now_ns - r.tool_started_ns)}{more}"


def _cells(r: TopRow, now_ns: int) -> dict[str, str | Text]:
    return {
        "session": r.short_id,
        "model": short_model(r.model) if r.model else "",
        "turn": f"{r.turns}" + ("▸" if r.turn_open else ""),
        "tokens": _compact(r.tokens),
        "tok/min": _compact(round(r.tokens_per_min)),
        "$/min": f"${dollars(r.usd_per_min)}",
        "cost": f"${dollars(r.cost_usd)}",
        "tool": _tool_cell(r, now_ns),
        "agents": str(r.agents_running) if r.agents_running else "",
        "last": _ago(now_ns - r.last_ns),
        "state": Text(r.state, style="bold red" if r.red else _STATE_STYLE.get(r.state, "")),
    }


def render_rows(rows: Sequence[TopRow], now_ns: int, width: int,
                selected: int | None = None) -> tuple[Table, list[str]]:
    """A table that fits ``width`` columns, and the columns given up for it."""
    cells = [_cells(r, now_ns) for r in rows]
    widths = {n: max([len(n), _STEADY.get(n, 0), *(len(c[n]) for c in cells)]) for n in _COLUMNS if n != "project"}
    want_project = max([len("project"), *(len(r.project) for r in rows)])
    shown, project_width = fit_with_path(widths, [n for n in _COLUMNS if n != "project"], _GIVE_WAY, want_project,
                                         _MIN_PROJECT, width)
    shown.insert(1, "project")
    widths["project"] = project_width
    table = Table(box=None, pad_edge=False, padding=(0, 0, 0, 1), show_edge=False, header_style="bold")
    for n in shown:
        table.add_column(n, justify="right" if n in _RIGHT else "left", no_wrap=True, width=widths[n])
    for i, (row, c) in enumerate(zip(rows, cells, strict=True)):
        c = dict(c, project=left_cut(row.project, project_width))
        table.add_row(*(c[n] for n in shown), style="reverse" if i == selected else None)
    return table, [n for n in _COLUMNS if n not in shown]


def frame(rows: Sequence[TopRow], now_ns: int, width: int, sort: Sort, roots: Sequence[str],
          selected: int | None = None, keys: bool = False) -> RenderableType:
    """One screen: a title line, the table (or why there is none), what gave way, the keys."""
    clock = time.strftime("%H:%M:%S", time.gmtime(now_ns / 1e9))
    red = sum(1 for r in rows if r.red)
    title = Text(f"ccotel top · {len(rows)} running · sort {sort.value} · {clock} UTC", style="bold")
    if red:
        title.append(f" · {red} need a look", style="bold red")
    parts: list[RenderableType] = [title]
    if rows:
        table, left_out = render_rows(rows, now_ns, width, selected)
        parts.append(table)
        if left_out:
            parts.append(Text(f"not shown at this width: {', '.join(left_out)}", style="dim"))
    else:
        parts.append(Text(f"no session running under {', '.join(roots)}", style="dim"))
    if keys:
        parts.append(Text("s sort · ↑↓ select · t/Enter trace · q quit", style="dim"))
    return Group(*parts)


# -- the live view ---------------------------------------------------------------------------------


@dataclass
class _View:
    sort: Sort
    rows: list[TopRow] = field(default_factory=list)
    selected: str | None = None  # the session selected: the selection follows it when the order changes
    trace_of: str | None = None  # the session whose trace is shown, if any
    quit: bool = False

    @property
    def index(self) -> int:
        """The selected row (the first when its session is no longer shown)."""
        return next((i for i, r in enumerate(self.rows) if r.session_id == self.selected), 0)

    def set_rows(self, rows: Sequence[TopRow]) -> None:
        self.rows = sort_rows(rows, self.sort)

    def _select(self, i: int) -> None:
        if self.rows:
            self.selected = self.rows[min(max(i, 0), len(self.rows) - 1)].session_id

    def key(self, data: bytes) -> bool:
        """Apply the keys read; True when the screen must be drawn again."""
        if self.trace_of is not None:
            if data in (b"q", b"\x1b", b"t", b"\r", b"\n"):
                self.trace_of = None
                return True
            return False
        changed = False
        for key in _keys(data):
            if key == "q":
                self.quit = True
            elif key == "s":
                self.sort = self.sort.next()
                self.set_rows(self.rows)
            elif key in ("up", "k"):
                self._select(self.index - 1)
            elif key in ("down", "j"):
                self._select(self.index + 1)
            elif key in ("t", "enter") and self.rows:
                self.trace_of = self.rows[self.index].session_id
            else:
                continue
            changed = True
        return changed


def _keys(data: bytes) -> list[str]:
    out = []
    i = 0
    while i < len(data):
        if data.startswith(b"\x1b[A", i) or data.startswith(b"\x1bOA", i):
            out.append("up")
            i += 3
        elif data.startswith(b"\x1b[B", i) or data.startswith(b"\x1bOB", i):
            out.append("down")
            i += 3
        else:
            ch = data[i:i + 1]
            out.append("enter" if ch in (b"\r", b"\n") else ch.decode("latin-1"))
            i += 1
    return out


def _trace_view(watcher: Watcher, session_id: str, width: int) -> RenderableType:
    ss = watcher.spans_of(session_id)
    hint = Text("q back", style="dim")
    if ss is None:
        return Group(Text(f"session {session_id}: no longer running", style="dim"), hint)
    turns = turns_of(ss)
    if not turns:
        return Group(Text(f"session {session_id}: no turn yet", style="dim"), hint)
    return Group(render_turn(select_turn(turns, None), ss, len(turns), width), hint)


def _draw(view: _View, watcher: Watcher, console: Console, roots: Sequence[str]) -> RenderableType:
    if view.trace_of is not None:
        return _trace_view(watcher, view.trace_of, console.width)
    return frame(view.rows, time.time_ns(), console.width, view.sort, roots, view.index, keys=True)


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _live(watcher: Watcher, console: Console, sort: Sort, interval: float, roots: Sequence[str]) -> int:
    view = _View(sort)
    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    signal.signal(signal.SIGTERM, _stop)  # `kill` ends it as q does: the terminal as it was
    signal.signal(signal.SIGHUP, _stop)
    try:
        if fd is not None:
            tty.setcbreak(fd)  # keys one at a time, unechoed; Ctrl-C still interrupts
        with Live(Text(f"reading the sessions under {', '.join(roots)}…", style="dim"), console=console,
                  screen=True, auto_refresh=False) as live:
            live.refresh()  # the first read of many recent sessions takes seconds: say so meanwhile
            due = 0.0
            while not view.quit:
                now = time.monotonic()
                if now >= due:
                    view.set_rows(watcher.rows())
                    due = now + interval
                    live.update(_draw(view, watcher, console, roots), refresh=True)
                wait = max(due - time.monotonic(), 0.0)
                if fd is None:  # no keys to read (stdin is not the terminal): refresh, Ctrl-C ends it
                    time.sleep(wait)
                elif select.select([fd], [], [], wait)[0] and view.key(os.read(fd, 64)):
                    live.update(_draw(view, watcher, console, roots), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        if fd is not None and saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return 0


# -- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel top`` options beyond cli.py's (--root, --prices, -v)."""
    minutes = finite(0, MAX_WAIT_S / 60, "minutes", above=True)
    parser.add_argument("--active", type=minutes, default=10.0, metavar="MINUTES",
                        help="a session is running if a transcript of it was written this recently, or its "
                             "process runs (default 10)")
    parser.add_argument("--window", type=minutes, default=5.0, metavar="MINUTES",
                        help="tokens and $ per minute over the calls that ended this recently (default 5)")
    parser.add_argument("--interval", type=finite(0.1, 3600, "seconds"), default=2.0, metavar="SECONDS",
                        help="seconds between refreshes, from 0.1 to 3600 (default 2)")
    parser.add_argument("--sort", choices=sorted(_SORT_NAMES), default="cost-rate", help="first order (s cycles)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit (so does a pipe)")
    parser.add_argument("--json", action="store_true", help="one frame's rows as JSON, every field")
    add_stall_timeout(parser, "seconds a reply may be owed before the session counts as stalled")
    parser.add_argument("--width", type=columns, default=None, help="render for this many columns")


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    watcher = Watcher(options, active_ns=int(args.active * 60e9), window_ns=int(args.window * 60e9))
    sort = _SORT_NAMES[args.sort]
    if args.json:
        now = time.time_ns()
        rows = sort_rows(watcher.rows(now), sort)
        doc = {"sessions": [r.as_dict(now) for r in rows]}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = stdout_console(args.width)
    if args.once or not console.is_terminal:
        now = time.time_ns()
        console.print(frame(sort_rows(watcher.rows(now), sort), now, console.width, sort, options.roots))
        return 0
    return _live(watcher, console, sort, args.interval, options.roots)
