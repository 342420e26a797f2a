"""The options several commands share: where the transcripts are, how a large history is read, where
spans go and where the state is kept. cli.py adds them to the commands that take them; a command
module adds those it needs when it is built alone (its tests and benchmarks build it so)."""

from __future__ import annotations

import argparse
import re
import time

TYPE_CHECKING = False  # typing is not loaded for a report's start: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Callable

    from ccotel.sources.orchestrator import Pattern
    from ccotel.spans.pricing import Price

__all__ = ["BACKFILL_PARALLEL_MIN_MB", "REPORT_PARALLEL_MIN_MB", "SIDECAR_PARALLEL_MIN_MB", "SIDECAR_WORKERS",
           "MAX_WAIT_S", "add_common", "add_durable", "add_reading", "add_registry", "add_stall_timeout",
           "add_tracing", "finite", "megabytes", "parse_since", "pattern_file", "price_file", "regex", "whole_number",
           "worker_count"]


def parse_since(value: str, now: float | None = None) -> int:
    """'2025-06-01', an ISO timestamp, or a duration back from now ('7d', '12h', '30m') -> Unix ns."""
    m = re.fullmatch(r"(\d+)([smhdw])", value.strip())
    if m:
        secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return int(((now if now is not None else time.time()) - secs) * 1e9)
    from datetime import datetime, timezone  # only for a date: a report's start does without it

    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date or duration: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1e9)


def price_file(path: str) -> dict[str, Price]:
    """``--prices FILE`` read and checked while the arguments are parsed: a bad file is a usage error
    (exit 2 before any work), and the commands take the prices, not the path, so it is read once."""
    from ccotel.spans.pricing import PriceFileError, load_overrides  # only when --prices is given

    try:
        return load_overrides(path)
    except PriceFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ccotel run reads its history beside the live sessions it follows, on a machine that is running
# Claude Code: by one worker process unless told otherwise, so what a first start holds is ccotel
# run and one worker, whatever the size of the history and the number of cores; and by that worker
# from a small size on, since what ccotel run reads itself stays in its memory for as long as it runs
# (the allocator keeps the pages) where a worker's is given back when it ends. A backfill, run to be
# done with, takes the cores (shard.default_workers) and reads a small history itself: below its
# threshold, starting worker processes costs more than they save.
SIDECAR_WORKERS = 1
SIDECAR_PARALLEL_MIN_MB = 16.0
BACKFILL_PARALLEL_MIN_MB = 256.0
# A report's readers are forked (shard.process_context): a second one costs little CPU to start, and
# on two free cores a large history is read in clearly less time (bench/NOTES.md).
REPORT_PARALLEL_MIN_MB = 64.0

# more processes than this reads no faster on any machine ccotel runs beside Claude Code, and each
# holds its own memory
MAX_WORKERS = 64


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` (to ``most``); anything else is a usage
    error before any work (a negative count was taken, and meant nothing or something odd)."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if n < least or (most is not None and n > most):
            raise argparse.ArgumentTypeError(f"{n} is not from {least} to {most}" if most is not None
                                             else f"{n} is less than {least}")
        return n

    return parse


def finite(least: float, most: float, unit: str, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a number of ``unit`` from ``least`` (more than it, with ``above``) to
    ``most``. NaN, an infinity or a word is a usage error before any work: each ended a command
    in a traceback where its seconds became nanoseconds."""

    def parse(value: str) -> float:
        try:
            n = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of {unit}: {value!r}") from None
        if not ((least < n) if above else (least <= n)) or not n <= most:  # NaN fails both
            raise argparse.ArgumentTypeError(f"{value} {unit} is not {'more than' if above else 'from'} {least:g}"
                                             f"{' and at most' if above else ' to'} {most:g}")
        return n

    return parse


# A wait longer than a year is not one a person means, and its nanoseconds stay an int64.
MAX_WAIT_S = 365 * 86400.0


def add_stall_timeout(sp: argparse.ArgumentParser, meaning: str) -> None:
    """``--stall-timeout SECONDS`` (``meaning``: what it decides in this command)."""
    from ccotel.assemble.closing import STALL_TIMEOUT_NS  # the rule's module: not loaded for a report's start

    sp.add_argument("--stall-timeout", type=finite(0, MAX_WAIT_S, "seconds", above=True),
                    default=STALL_TIMEOUT_NS / 1e9, metavar="SECONDS",
                    help=f"{meaning} (default %(default)g)")


def regex(value: str) -> str:
    """An argparse type: a regular expression that compiles (``--redact``); else a usage error
    before any work, not a traceback once content is first captured."""
    import re as re_  # (this module's re is for --since)

    try:
        re_.compile(value)
    except re_.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc}): {value!r}") from None
    return value


def pattern_file(path: str) -> tuple[Pattern, ...]:
    """``--orchestrator-patterns FILE`` read and checked while the arguments are parsed, as
    ``price_file``: a file that is missing or wrong is a usage error before any work."""
    from ccotel.sources.orchestrator import PatternFileError, load_patterns

    try:
        return load_patterns(path)
    except PatternFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ``--workers N``: from 0 (read in this process, as 1 does outside ccotel run) to MAX_WORKERS
worker_count = whole_number(0, MAX_WORKERS)


def megabytes(value: str) -> float:
    """``--parallel-min-mb MB``: a size from 0 up; anything else is a usage error before any work."""
    try:
        mb = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 <= mb < 1e12:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"{value} is not a size in MB from 0 up")
    return mb


def add_reading(sp: argparse.ArgumentParser, parallel_min_mb: float, sidecar: bool = False) -> None:
    """How a large history is read: worker processes, the size from which they are used, prices.
    ``sidecar``: ccotel run's, read beside the live sessions it follows."""
    if sidecar:
        workers = (f"worker processes that read the history beside ccotel run (default {SIDECAR_WORKERS}; "
                   "0: ccotel run reads it itself)")
        below = "a history with less than this to read (MB) is read by ccotel run itself (default %(default)g)"
    else:
        workers = "processes that read a large history in parallel (default: the cores, at most 4)"
        below = "a history with less than this to read (MB) is read by one process (default %(default)g)"
    sp.add_argument("--workers", type=worker_count, default=SIDECAR_WORKERS if sidecar else None, help=workers)
    sp.add_argument("--parallel-min-mb", type=megabytes, default=parallel_min_mb, help=below)
    sp.add_argument("--prices", type=price_file, default=None, metavar="FILE",
                    help="JSON of model -> USD per million tokens, overriding genai-prices' table")
    sp.add_argument("-v", "--verbose", action="store_true")


def add_common(sp: argparse.ArgumentParser, sidecar: bool = False) -> None:
    """The roots, --since and how a history is read; ``sidecar``: as ccotel run reads it."""
    sp.add_argument("--root", action="append", default=None,
                    help="Claude config dir to read (repeatable; default $CLAUDE_CONFIG_DIR or ~/.claude)")
    sp.add_argument("--since", type=parse_since, default=None,
                    help="only turns started after this date or duration ago (2025-06-01, 7d, 12h)")
    add_reading(sp, parallel_min_mb=SIDECAR_PARALLEL_MIN_MB if sidecar else BACKFILL_PARALLEL_MIN_MB, sidecar=sidecar)


def add_tracing(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--traces-exporter", choices=("otlp", "console", "none"), default="otlp",
                    help="where spans go; otlp uses the standard OTEL_EXPORTER_OTLP_* variables")
    sp.add_argument("--capture-content", action="store_true",
                    help="export prompt and tool input/output text (truncated, redacted); off by default")
    sp.add_argument("--max-attribute-length", type=whole_number(1), default=4096, metavar="N",
                    help="captured content longer than this many characters is cut (default %(default)s)")
    sp.add_argument("--redact", action="append", default=[], metavar="REGEX", type=regex,
                    help="extra pattern to redact from captured content (repeatable)")
    add_stall_timeout(sp, "seconds a tool call may go without a result before it counts as orphaned")


def add_registry(sp: argparse.ArgumentParser) -> None:
    """``ccotel run``'s agent registry options (sources/registry)."""
    sp.add_argument("--registry", action="append", default=[], metavar="DIR",
                    help="an orchestrator's agent registry to follow (.active-pids.json and "
                         "agent-responses/<agentId>.md): agent spans, agents by outcome, killed agents "
                         "(repeatable)")
    sp.add_argument("--registry-kill-grace", type=finite(0, 3600, "seconds"), default=5.0, metavar="SECONDS",
                    help="how long an agent's process must be gone while its Status still says "
                         "in-progress before it counts as killed")


def add_label_cap(sp: argparse.ArgumentParser) -> None:
    """The cap on label values from transcripts and streams (metrics/counters.py, LabelCap)."""
    from ccotel.metrics.counters import DEFAULT_MAX_LABEL_VALUES

    sp.add_argument("--max-label-values", type=whole_number(1), default=DEFAULT_MAX_LABEL_VALUES, metavar="N",
                    help="distinct values of a metric's label (tool, model, ...) with series of their own; "
                         "later ones are counted as \"other\"")


def add_durable(sp: argparse.ArgumentParser, lease: bool = False) -> None:
    """``lease``: the command holds a fleet host's claims on spans (run, backfill): --claim-lease."""
    sp.add_argument("--state", default=None, metavar="DIR|URL",
                    help="checkpoints, counter totals and the usage ledger: a dir (SQLite, one host; default "
                         "$CCOTEL_STATE or $XDG_STATE_HOME/ccotel), a postgresql:// URL (one state for a fleet; "
                         "password from PGPASSWORD or ~/.pgpass rather than the URL), or 'none' to keep nothing")
    sp.add_argument("--state-dir", default=None, help="the same as --state (a dir)")
    sp.add_argument("--host-id", default=None,
                    help="this host's name in a shared (PostgreSQL) state (default $CCOTEL_HOST_ID, the host name)")
    if lease:
        sp.add_argument("--claim-lease", default=None, metavar="SECONDS",
                        help="a fleet (PostgreSQL state): how long after this host was last seen alive other "
                             "hosts take over the spans it claimed and did not deliver (default $CCOTEL_CLAIM_LEASE "
                             "or 60)")
