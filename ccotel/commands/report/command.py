"""``ccotel report``: its options and ``run``, which answers from the ledger alone when it can
(summed in SQLite: neither the transcript reader, the pipeline, genai-prices nor rich is loaded;
a table needs rich, ``--json`` does not) and else reads the transcripts written since (or all of
them, without a ledger)."""

from __future__ import annotations

import argparse
import re
import sys

from ccotel.commands.options import REPORT_PARALLEL_MIN_MB, add_durable, add_reading
from ccotel.commands.report.freshness import RACY_NS, REREAD_GRACE_NS, unchanged, written_since
from ccotel.commands.report.kept import (
    answer_key,
    keep,
    ledger_source,
    plain_command_line,
    print_answer,
    transcripts_source,
)
from ccotel.commands.report.views import VIEWS, WEEKDAYS
from ccotel.read.layout import default_roots
from ccotel.store.location import resolve_state

# typing, datetime and the modules that sum a report are not loaded before a kept answer is looked
# for (kept.py): mypy reads this block, Python does not
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import date, tzinfo
    from typing import NoReturn

    from ccotel.commands.report.freshness import Listing
    from ccotel.commands.report.rows import Query, Report
    from ccotel.spans.pricing import Price
    from ccotel.store.ledger import Ledger

__all__ = ["parse_day", "parse_token_limit", "parse_zone", "add_options", "add_arguments", "run", "run_from_ledger"]

def parse_day(value: str) -> date:
    """YYYYMMDD (as ccusage), YYYY-MM-DD, or a duration back from today (7d, 2w, 12h: the day it
    falls on, as the other commands' --since takes it)."""
    from datetime import datetime, timedelta

    m = re.fullmatch(r"(\d+)([hdw])", value.strip())
    if m:
        hours = int(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        return (datetime.now().astimezone() - timedelta(hours=hours)).date()
    for fmt in ("%Y%m%d", "%Y-%m-%d"):
        try:
            return datetime.strptime(value.strip(), fmt).date()
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(f"not a date (YYYYMMDD, YYYY-MM-DD or a duration: 7d): {value!r}")


def parse_token_limit(value: str) -> str:
    """``--token-limit``: a positive number of tokens, or ``max`` (the largest finished block)."""
    v = value.strip().lower()
    if v == "max" or (v.isdigit() and int(v) > 0):
        return v
    raise argparse.ArgumentTypeError(f"not a token limit (a number of tokens, or max): {value!r}")


def parse_zone(value: str) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only when --timezone is given

    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown time zone: {value!r} (e.g. UTC, Europe/Berlin)") from None


def add_options(parser: argparse.ArgumentParser) -> None:
    """Every ``ccotel report`` option: the roots, the state, and the report's own."""
    parser.add_argument("--root", action="append", default=None,
                        help="Claude config dir to read (repeatable; default $CLAUDE_CONFIG_DIR or ~/.claude)")
    add_durable(parser)
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ccotel report`` options (besides --root and --state-dir, which cli.py adds)."""
    parser.add_argument("view", nargs="?", choices=(*VIEWS, "blocks"), default="session",
                        help="rows by day, week, month, session (default) or project; blocks: 5-hour windows")
    parser.add_argument("--json", action="store_true", help="JSON shaped like `ccusage <view> --json`")
    parser.add_argument("-b", "--breakdown", action="store_true", help="a line per model under each row")
    parser.add_argument("-s", "--since", type=parse_day, default=None, metavar="DATE",
                        help="from this day (YYYYMMDD or YYYY-MM-DD, in --timezone), inclusive")
    parser.add_argument("-u", "--until", type=parse_day, default=None, metavar="DATE",
                        help="until this day, inclusive")
    parser.add_argument("-z", "--timezone", type=parse_zone, default=None, metavar="TZ",
                        help="time zone for days, weeks and months (default: the system's)")
    parser.add_argument("-w", "--start-of-week", choices=WEEKDAYS, default="sunday",
                        help="first day of a week (default sunday, as ccusage)")
    parser.add_argument("-o", "--order", choices=("asc", "desc"), default="asc")
    parser.add_argument("-t", "--token-limit", type=parse_token_limit, default=None, metavar="N|max",
                        help="blocks: a token limit to project the active block against (max: the largest block)")
    parser.add_argument("-a", "--active", action="store_true", help="blocks: the active block only")
    parser.add_argument("--no-ledger", action="store_true",
                        help="read the transcripts only (history Claude Code deleted is then missing)")
    add_reading(parser, parallel_min_mb=REPORT_PARALLEL_MIN_MB)


def run(args: argparse.Namespace, now_ns: int | None = None, command_line: Sequence[str] | None = None) -> int:
    """``ccotel report``: print the view (a table, or JSON with --json). Exit 0. ``now_ns``: the
    time the blocks view takes as now (a test's; default the clock's); ``command_line``: the
    arguments as typed after ``report`` (an answer read from the transcripts is kept for them)."""
    import time

    from ccotel.commands.report.from_ledger import open_ledger, summarize_ledger
    from ccotel.commands.report.summary import summarize

    roots = tuple(args.root or default_roots())
    overrides: dict[str, Price] | None = args.prices  # read and checked by --prices' type (options.price_file)
    ledger = None
    cache_dir = None  # the report cache's dir (group_read.py): a local state dir, default prices
    if not args.no_ledger:  # the state dir is looked for only when its ledger may be used
        state_dir = resolve_state(getattr(args, "state", None), args.state_dir)
        ledger = open_ledger(state_dir, roots, getattr(args, "host_id", None))
        if state_dir and overrides is None and not state_dir.startswith(("postgresql://", "postgres://")):
            cache_dir = state_dir
    q = _query(args)
    started_ns = time.time_ns()
    try:
        if ledger is not None and _answers_alone(ledger, q, roots):
            report = summarize_ledger(ledger, q)
        else:
            from ccotel.commands.report.read_options import ReadOptions
            from ccotel.spans.pricing import DEFAULT_PRICING, Pricing

            pricing = DEFAULT_PRICING if overrides is None else Pricing(overrides)
            options = ReadOptions(roots=roots, pricing=pricing)
            if ledger is None:
                from ccotel.commands.report.group_read import read_transcripts
                from ccotel.run.cyclic_gc import fewer_collections

                with fewer_collections():  # the files found, the cache's entries: many objects, few cycles
                    data = read_transcripts(options, args.workers, int(args.parallel_min_mb * 1e6), cache_dir,
                                            calls=q.view == "blocks")
            else:
                from ccotel.commands.report.transcripts import gather  # the transcript reader: only when it reads

                data = gather(options, ledger, workers=args.workers, parallel_min_bytes=int(args.parallel_min_mb * 1e6))
            if q.view == "blocks":
                from ccotel.commands.report.blocks_view import print_blocks

                return print_blocks(data, q, args, time.time_ns() if now_ns is None else now_ns)
            report = summarize(data, q)
    finally:
        if ledger is not None:
            ledger.close()
    if ledger is None and cache_dir and command_line is not None and args.json:
        return print_answer(_keep_read(report, roots, cache_dir, command_line, started_ns))
    return _show(report, q, args)


def _keep_read(report: Report, roots: tuple[str, ...], state_dir: str, command_line: Sequence[str],
               started_ns: int) -> bytes:
    """The JSON of a report read from the transcripts, kept (kept.py) for a plain command line
    naming these roots and state dir when there is no ledger there and no transcript was touched
    since the read began (what it read is then what is on disk)."""
    import orjson

    from ccotel.commands.report.json_doc import as_json

    answer = orjson.dumps(as_json(report), option=orjson.OPT_INDENT_2) + b"\n"
    plain = plain_command_line(command_line)
    listing: Listing = {}
    if plain == (roots, state_dir) and ledger_source(state_dir) is None \
            and not written_since(roots, started_ns - RACY_NS, keep=listing) and unchanged(roots, listing):
        keep(state_dir, answer_key(transcripts_source(), plain, command_line), 0, listing, answer)
    return answer


class _NotPlain(Exception):
    """The arguments are not for run_from_ledger's parser to judge (an error; --help, which it
    does not know, is one): cli.py's parser says it."""


class _PlainParser(argparse.ArgumentParser):
    def __init__(self) -> None:
        # A fixed width: argparse's default asks shutil for the terminal's (importing shutil), and
        # this parser never prints its help (add_help=False; errors go to cli.py's parser).
        super().__init__(prog="ccotel report", add_help=False,
                         formatter_class=lambda prog: argparse.HelpFormatter(prog, width=80))

    def error(self, message: str) -> NoReturn:
        raise _NotPlain(message)


def run_from_ledger(argv: list[str]) -> int | None:
    """``ccotel report ARGV`` when the ledger answers it alone, as ``run`` answers it: started
    without cli.py, the other commands' options or logging (``python -m ccotel`` comes here
    first). None, with nothing printed or logged: it does not (bad or unknown arguments, --help,
    no usable SQLite ledger, a transcript written since, blocks); cli.py's parser and ``run`` then
    take the arguments from the start."""
    parser = _PlainParser()
    add_options(parser)
    try:
        args = parser.parse_args(argv)
    except _NotPlain:
        return None
    location = None if args.no_ledger else resolve_state(args.state, args.state_dir)
    if not location or location.startswith(("postgresql://", "postgres://")):  # a fleet's: cli.py checks it first
        return None
    roots = tuple(args.root or default_roots())
    plain = plain_command_line(argv) if args.json and args.view != "blocks" else None
    source = ledger_source(location) if plain == (roots, location) else None  # before the ledger is read
    from ccotel.commands.report.from_ledger import open_ledger, summarize_ledger

    ledger = open_ledger(location, roots, quiet=True)
    if ledger is None:
        return None
    q = _query(args)
    listing: Listing = {}
    try:
        if not _answers_alone(ledger, q, roots, listing):
            return None
        since_ns = _since(ledger)
        report = summarize_ledger(ledger, q)
    finally:
        ledger.close()
    if plain is None or source is None:
        try:
            return _show(report, q, args, lean=True)
        except BrokenPipeError:  # as cli.main ends a `ccotel report | head`
            from ccotel.run.stopping import end_quietly

            return end_quietly()
    from ccotel.commands.report.json_doc import as_json, dumps

    answer = (dumps(as_json(report)) + "\n").encode()
    keep(location, answer_key(source, plain, argv), since_ns, listing, answer)
    return print_answer(answer)


def _query(args: argparse.Namespace) -> Query:
    from ccotel.commands.report.rows import Query

    return Query(view=args.view, tz=args.timezone, since=args.since, until=args.until,
                 start_of_week=WEEKDAYS.index(args.start_of_week), order=args.order)


def _answers_alone(ledger: Ledger, q: Query, roots: tuple[str, ...], listing: Listing | None = None) -> bool:
    """Does the ledger answer ``q`` alone (summed in SQL), with no transcript read? ``listing``:
    filled with the roots' directories as listed (freshness.written_since's ``keep``)."""
    from ccotel.store.ledger import Ledger  # loaded by open_ledger already

    return (q.view != "blocks"  # blocks need each call's time: they read the calls themselves
            and type(ledger) is Ledger  # summed in SQL: SQLite's ledger, not a fleet's
            and not ledger.coverage().filling  # else every transcript is read beside it
            and not written_since(roots, _since(ledger), keep=listing))


def _since(ledger: Ledger) -> int:
    """Transcripts modified at or after this are read again: the ledger may not hold them yet."""
    return ledger.coverage().updated_ns - REREAD_GRACE_NS


def _show(report: Report, q: Query, args: argparse.Namespace, lean: bool = False) -> int:
    """Print the report. ``lean``: started by run_from_ledger, where orjson is not loaded: its import
    (dataclasses, uuid...) costs more than writing the JSON in Python (json_doc.dumps, the same
    bytes); on cli.py's way (which loads orjson with its other commands, and reads transcripts)
    orjson writes a large report faster."""
    from ccotel.commands.report.json_doc import as_json, dumps

    if args.json:
        if lean:
            text = dumps(as_json(report))
        else:
            import orjson

            text = orjson.dumps(as_json(report), option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(text + "\n")
        return 0
    from ccotel.commands.report.table import render, stdout_console  # rich: only for a table

    render(report, stdout_console(), q, breakdown=args.breakdown)
    return 0

