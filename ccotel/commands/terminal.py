"""The rich console every command prints its tables with, and the one rule for its width.

Width: ``--width`` when given; else on a terminal the terminal's width (rich asks it; COLUMNS,
when set, wins as it does for every curses program); else, stdout being a pipe or a file,
COLUMNS when set and else ``PIPE_WIDTH``: wide enough that no column of any command gives way,
so ``ccotel report | grep`` or ``> file`` loses nothing, whatever width a terminal had.

rich answers a closed stdout (`ccotel sessions | head`) by exiting with status 1; ccotel ends such
a command quietly with status 0 (cli.main, as `yes | head` does), so the closed pipe is passed on as
the BrokenPipeError it is.
"""

from __future__ import annotations

import errno
import math
import os
import sys
from typing import TextIO

from rich.console import Console

__all__ = ["MIN_WIDTH", "PIPE_WIDTH", "PipeConsole", "columns", "dollars", "fit_with_path", "left_cut", "output_width",
           "short_model", "stdout_console"]

PIPE_WIDTH = 200  # off a terminal without COLUMNS
# The narrowest width a table is laid out for: --width below it is refused, and a terminal (or
# COLUMNS) narrower gets it anyway, its lines wrapped by the terminal (trace's time axis failed
# below 30 columns).
MIN_WIDTH = 40


def columns(value: str) -> int:
    """``--width N``: a whole number of columns, at least MIN_WIDTH; else a usage error."""
    from ccotel.commands.options import whole_number  # (argparse: only when a command line is parsed)

    return whole_number(MIN_WIDTH)(value)


class PipeConsole(Console):
    """A rich Console whose closed stdout raises BrokenPipeError, for cli.main to end quietly."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written to the closed pipe
        raise BrokenPipeError(errno.EPIPE, "stdout closed")


def output_width(out: TextIO, width: int | None = None) -> int | None:
    """The width to render for (module docstring); None: the terminal's, as rich finds it."""
    if width is not None and width > 0:
        return width
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: not a terminal
        tty = False
    if tty:
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def stdout_console(width: int | None = None, file: TextIO | None = None) -> PipeConsole:
    """The console of a command's table: ``file`` (default stdout) at ``output_width``; colour only
    on a terminal and without NO_COLOR (rich checks both)."""
    out = file if file is not None else sys.stdout
    _replace_unencodable(out)
    console = PipeConsole(file=out, width=output_width(out, width), highlight=False)
    if console.width < MIN_WIDTH:
        console.width = MIN_WIDTH
    return console


def _replace_unencodable(out: TextIO) -> None:
    """A stream that cannot encode the tables' characters (``·``, ``…``, the bars: an ASCII locale,
    PYTHONIOENCODING=ascii) writes ``?`` for them instead of ending the command in an encoding
    error (trace and top did)."""
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    reconfigure = getattr(out, "reconfigure", None)
    if encoding and not encoding.startswith("utf") and reconfigure is not None:
        reconfigure(errors="replace")


def dollars(usd: float) -> str:
    """The one rule for a cost in every table (report, sessions, trace): to the cent, and a cost
    under a cent (one API call often is) to its first two significant digits, so it does not read
    as 0.00. Never cut; the figures are estimates at list prices, and --json has them unrounded."""
    if usd == 0 or abs(usd) >= 0.005:
        return f"{usd:,.2f}"
    places = min(8, 1 - math.floor(math.log10(abs(usd))))
    return f"{usd:.{places}f}"


def short_model(model: str) -> str:
    """A model's name in a table: whole, never broken across lines, and short: without the
    ``claude-`` every one has and without a date suffix (``claude-sonnet-4-20250514`` ->
    ``sonnet-4``). --json has the full name."""
    name = model[len("claude-"):] if model.startswith("claude-") else model
    head, _, tail = name.rpartition("-")
    return head if head and len(tail) == 8 and tail.isdigit() else name


def left_cut(path: str, width: int) -> str:
    """A path on one line of ``width``: its end (the project's own name) kept, the start cut to
    ``…``. A path is no number: it may give way; --json has it whole."""
    return path if len(path) <= width else "…" + path[-(max(width, 2) - 1):]


def fit_with_path(widths: dict[str, int], names: list[str], give_way: list[str] | tuple[str, ...],
                  want_path: int, min_path: int, width: int) -> tuple[list[str], int]:
    """The columns of a borderless table (a space before each) that fit ``width`` beside a path
    column: those in ``give_way`` go first, in its order, whole; the path takes what is left (at
    least ``min_path``, at most ``want_path``) and is cut from its start (left_cut)."""
    shown = list(names)
    for name in give_way:
        if sum(widths[n] for n in shown) + len(shown) + min_path <= width:
            break
        shown.remove(name)
    return shown, max(min_path, min(want_path, width - sum(widths[n] for n in shown) - len(shown)))
