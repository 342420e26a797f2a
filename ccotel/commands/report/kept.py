"""Kept answers: the JSON of a report the usage ledger answered alone, or read from the
transcripts through the report cache when there is no ledger, kept in the state dir
(``report-answers/``, 0700, each answer 0600, the newest ``MAX_KEPT``) so that the same report
asked again, with what it read unchanged, prints the kept bytes without opening SQLite or summing
anything (a script or status bar asking every few seconds).

An answer is a function of its source, the command line, the time zone and this code, and its key
holds all four: the ledger's signature (store/ledger_peek.ledger_signature: its inode, sizes,
mtimes and WAL index header, which every commit changes) or the installed price table, the
arguments as typed with the roots and state dir they name, the local zone's definition, and the
size and mtime of every module of the installed ccotel. Whether it still holds is asked again each
time: for the ledger's, by the rule the report itself applies (freshness.written_since, from the
ledger's last write kept with the answer); for the transcripts', every directory and file under
the roots as the listing kept with it holds them (freshness.unchanged).

The command line is read by hand (``plain_command_line``), before argparse (which, with ``re``,
costs more than the rest of such a report): only the options listed below, spelled in full, and
no date given as a duration back from now (``-s 7d``: its day moves with the clock). Any other
command line has no kept answer; one is kept only after argparse read it to the same roots and
state dir. Only ``--json`` answers are kept: a table depends on the terminal too. Anything amiss
(no dir, a damaged or foreign file) is a miss, never an error: the report is then summed as
without it."""

from __future__ import annotations

import marshal
import os
import sys
import zlib

from ccotel.commands.report.freshness import unchanged, written_since
from ccotel.commands.report.views import VIEWS
from ccotel.read.layout import default_roots
from ccotel.store.ledger_peek import ledger_signature
from ccotel.store.location import is_url, resolve_state
from ccotel.store.private_file import write_private

TYPE_CHECKING = False  # typing is not loaded on this path: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ccotel.commands.report.freshness import Listing

__all__ = ["ANSWERS_DIR", "MAX_KEPT", "Kept", "plain_command_line", "answer_key", "ledger_source", "transcripts_source",
           "print_kept", "print_answer", "load", "keep"]

ANSWERS_DIR = "report-answers"
MAX_KEPT = 16  # different reports kept at once (a status bar's, a script's, a user's)
_FORMAT = "ccotel kept answer 2"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The options a plain command line may hold (command.add_options' names, in full): with a value,
# and without one. Other options (--prices, blocks' options, --no-ledger) have no kept answer.
_VALUED = frozenset(("--root", "--state", "--state-dir", "-s", "--since", "-u", "--until", "-z", "--timezone",
                     "-w", "--start-of-week", "-o", "--order", "--workers", "--parallel-min-mb", "--host-id"))
_FLAGS = frozenset(("--json", "-b", "--breakdown", "-v", "--verbose"))

if TYPE_CHECKING:
    Plain = tuple[tuple[str, ...], str]  # the roots and the state dir a plain command line names


def plain_command_line(argv: Sequence[str], env: dict[str, str] | None = None) -> Plain | None:
    """The roots and state dir of a plain report command line (see above), as argparse and
    command.run would take them; None if it is not plain or names no state dir (none, a URL)."""
    roots: list[str] = []
    state = state_dir = None
    view = False
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in _VALUED:
            if not eq:
                if i >= len(argv):
                    return None
                value, i = argv[i], i + 1
            if value.startswith("-") or _duration(value):
                return None
            if name == "--root":
                roots.append(value)
            elif name == "--state":
                state = value
            elif name == "--state-dir":
                state_dir = value
        elif name in _FLAGS and not eq:
            continue
        elif token in VIEWS and not view:
            view = True
        else:
            return None
    location = resolve_state(state, state_dir, env)
    if location is None or is_url(location):
        return None
    return tuple(roots or default_roots(env)), location


def _duration(value: str) -> bool:
    """7d, 2w, 12h: command.parse_day's days back from now (which it reads with spaces around)."""
    value = value.strip()
    return value[-1:] in ("h", "d", "w") and value[:-1].isdigit()


def answer_key(source: list[Any], plain: Plain, argv: Sequence[str]) -> str:
    """Everything the answer is a function of, as text; ``source``: ``ledger_source`` or
    ``transcripts_source``."""
    roots, location = plain
    return repr((_FORMAT, source, sorted(os.path.realpath(r) for r in roots), os.path.realpath(location),
                 list(argv), _zone(), _code()))


def print_kept(argv: Sequence[str], end: bool = False) -> int | None:
    """Print the kept answer to ``ccotel report ARGV`` and return 0, or None (nothing printed)
    when none is kept for it or it no longer holds. ``end``: once it is printed, end the process
    at once (os._exit): nothing else is open, and the interpreter's teardown (freeing the listing
    and the answer object by object) costs more than the rest of such a report."""
    plain = plain_command_line(argv)
    if plain is None:
        return None
    roots, location = plain
    source = ledger_source(location)
    if source is not None:  # the ledger's answer: kept while no transcript is written since
        found = load(location, answer_key(source, plain, argv))
        if found is None or written_since(roots, found.since_ns, found.listing):
            return None
    else:  # the transcripts' (through the report cache): kept while every file is as it was
        found = load(location, answer_key(transcripts_source(), plain, argv))
        if found is None or not unchanged(roots, found.listing):
            return None
    code = print_answer(found.answer)
    if end:
        os._exit(code)
    return code


def ledger_source(location: str) -> list[Any] | None:
    """The source of an answer from the ledger in ``location``; None: there is no ledger."""
    signature = ledger_signature(location)
    return None if signature is None else ["ledger", signature]


def transcripts_source() -> list[Any]:
    """The source of an answer read from the transcripts: they are in the listing kept with it,
    and the costs are the installed price table's."""
    from ccotel.spans.price_table import price_table_key  # importlib.util: only for this answer

    return ["transcripts", price_table_key()]


def print_answer(answer: bytes | memoryview) -> int:
    """Write a report's bytes to stdout: 0 (a reader that went away is not an error)."""
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    except BrokenPipeError:  # as cli.main ends a `ccotel report | head`
        from ccotel.run.stopping import end_quietly

        return end_quietly()
    return 0


class Kept:
    """A kept answer: the ``since_ns`` written_since asks about, the roots' directories as listed
    then (freshness.Listing), and the answer's bytes."""

    __slots__ = ("since_ns", "listing", "answer")

    def __init__(self, since_ns: int, listing: Listing, answer: bytes | memoryview) -> None:
        self.since_ns = since_ns
        self.listing = listing
        self.answer = answer


def load(state_dir: str, key: str) -> Kept | None:
    """The answer kept for exactly ``key``, or None."""
    try:
        with open(_path(state_dir, key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    head = key.encode() + b"\n"
    if not data.startswith(head):
        return None  # another key with the same file name, or a damaged file
    try:  # the answer is a view: a large one is not copied on its way to stdout
        at = data.index(b"\n", len(head))
        start = data.index(b"\n", at + 1) + 1
        end = start + int(data[at + 1:start - 1])
        if end > len(data):
            return None
        view = memoryview(data)
        listing = marshal.loads(view[start:end])
        if not isinstance(listing, dict):
            return None
        return Kept(int(data[len(head):at]), listing, view[end:])
    except (ValueError, EOFError, TypeError):
        return None


def keep(state_dir: str, key: str, since_ns: int, listing: Listing, answer: bytes) -> None:
    """Keep ``answer`` for ``key`` (written whole or not at all), and drop the oldest beyond
    MAX_KEPT. A failure is let go: without a kept answer the next report sums again."""
    path = _path(state_dir, key)
    blob = marshal.dumps(listing)
    try:
        write_private(path, [b"%s\n%d\n%d\n" % (key.encode(), since_ns, len(blob)), blob, answer])
        _drop_oldest(os.path.dirname(path))
    except OSError:
        pass


def _path(state_dir: str, key: str) -> str:
    return os.path.join(state_dir, ANSWERS_DIR, f"{zlib.crc32(key.encode()):08x}.json")


def _drop_oldest(folder: str) -> None:
    with os.scandir(folder) as it:
        kept = sorted(((e.stat().st_mtime_ns, e.path) for e in it if e.name.endswith(".json")), reverse=True)
    for _mtime, path in kept[MAX_KEPT:]:
        try:
            os.unlink(path)
        except OSError:
            pass


def _zone() -> tuple[Any, ...]:
    """The local time zone as the C library finds it (days and weeks without --timezone)."""
    try:
        st = os.stat("/etc/localtime")
        local: tuple[Any, ...] = (os.path.realpath("/etc/localtime"), st.st_size, st.st_mtime_ns)
    except OSError:
        local = ()
    return os.environ.get("TZ"), local


def _code() -> tuple[int, int, int]:
    """(modules, their total size, the sum of their mtimes) of the ccotel package: an upgrade, or
    an edit of any module (its mtime moves, either way), is another key."""
    count = size = mtimes = 0
    stack = [_PACKAGE]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.name.endswith(".py"):
                    st = entry.stat()
                    count += 1
                    size += st.st_size
                    mtimes += st.st_mtime_ns
                elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return count, size, mtimes
